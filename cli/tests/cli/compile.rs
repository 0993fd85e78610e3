//! The compile cache `wasmpod run` keeps, and `wasmpod compile`'s precompiled artefacts.

use super::*;

/// The second run of a module takes it from the compile cache; the `Pulled` event says which.
/// The first runs its module and component on baseline code (Winch, on x86-64), with the same
/// output, and ends only once the optimized code is in the cache.
#[test]
fn compile_cache_is_reused() {
    let dir = Dir::new();
    let pod = dir.write("pod.yaml", HELLO);
    let cache = dir.path("cache");
    let pulled_with = |n: &str, cache: &std::path::Path, extra: &[&str]| {
        let ev = dir.path(n);
        let out = dir
            .wasmpod()
            .args([
                "run",
                "--cache-dir",
                cache.to_str().unwrap(),
                "--state-dir",
                dir.path("state").to_str().unwrap(),
            ])
            .args(extra)
            .args(["--events", ev.to_str().unwrap()])
            .arg(&pod)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("hello from p1") && stdout.contains("hello from p2"),
            "{stdout}"
        );
        events(&ev)
            .into_iter()
            .filter(|e| e["reason"] == "Pulled")
            .map(|e| e["message"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let pulled = |n: &str| pulled_with(n, &cache, &[]);
    let cold = pulled("cold.jsonl");
    assert!(
        cold.iter().all(|m| m.starts_with("Successfully compiled")
            && m.contains("baseline code") == cfg!(target_arch = "x86_64")),
        "{cold:?}"
    );
    let warm = pulled("warm.jsonl");
    assert!(
        warm.iter().all(|m| m.contains("from the compile cache")),
        "{warm:?}"
    );

    let untiered = pulled_with(
        "untiered.jsonl",
        &dir.path("cache-untiered"),
        &["--tiered-compilation=false"],
    );
    assert!(
        untiered
            .iter()
            .all(|m| m.starts_with("Successfully compiled") && !m.contains("baseline")),
        "{untiered:?}"
    );

    // a corrupt cache entry is recompiled, not trusted
    for entry in std::fs::read_dir(&cache).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n / 2] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
    }
    let corrupt = pulled("corrupt.jsonl");
    assert!(
        corrupt
            .iter()
            .all(|m| m.starts_with("Successfully compiled")),
        "{corrupt:?}"
    );
}

/// `wasmpod compile` makes a `.cwasm` a node runs as it is (a wasip1 module and a wasip2
/// component); an artefact made for another node is refused with what differs and how to make
/// one for this node, never loaded: another address-space mode, another wasmpod version, a file
/// that is not an artefact; a target this build has no code generator for is an error that says
/// which build has.
#[test]
fn compiled_artefacts_run_and_foreign_ones_are_refused() {
    let dir = Dir::new();
    let compile = |input: &str, output: &str, extra: &[&str]| {
        dir.wasmpod()
            .arg("compile")
            .args(extra)
            .arg(fill(input))
            .arg("-o")
            .arg(dir.path(output))
            .output()
            .unwrap()
    };
    let run = |image: &str| {
        let pod = dir.write(
            "pod.yaml",
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{ name: pre }}\nspec:\n  restartPolicy: Never\n  \
                 containers:\n  - {{ name: c, image: {image}, args: [print, hi] }}\n"
            ),
        );
        let events = dir.path("events.jsonl");
        let out = dir
            .wasmpod()
            .args(["run", "--state-dir", dir.path("state").to_str().unwrap()])
            .args(["--events", events.to_str().unwrap()])
            .arg(&pod)
            .output()
            .unwrap();
        (out, events)
    };
    for (guest, artefact) in [("{p1}", "p1.cwasm"), ("{p2}", "p2.cwasm")] {
        let out = compile(guest, artefact, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let (out, events) = run(artefact);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "[c] hi\n");
        let pulled: Vec<Value> = events_of(&events, "Pulled");
        assert!(
            pulled[0]["message"]
                .as_str()
                .unwrap()
                .starts_with("Loaded precompiled module"),
            "{pulled:?}"
        );
    }

    // Made for a node with little address space: bounds checks this node's code does not have.
    let out = compile("{p1}", "compact.cwasm", &["--compact"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (out, _) = run("compact.cwasm");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("was precompiled for another node")
            && stderr.contains("memory reservation")
            && stderr.contains("wasmpod compile --target x86_64-unknown-linux-gnu --reserved"),
        "{stderr}"
    );

    // Another wasmpod's artefact (its version string changed, as another release writes it).
    let mut bytes = std::fs::read(dir.path("p1.cwasm")).unwrap();
    let version = format!("wasmpod {} on", env!("CARGO_PKG_VERSION"));
    let at = bytes
        .windows(version.len())
        .position(|w| w == version.as_bytes())
        .expect("the artefact names its wasmpod");
    bytes[at + 8] = b'9';
    std::fs::write(dir.path("other.cwasm"), bytes).unwrap();
    let (out, _) = run("other.cwasm");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("was precompiled for another node") && stderr.contains("version"),
        "{stderr}"
    );

    // An ELF file that is no artefact.
    std::fs::copy("/bin/true", dir.path("true.cwasm")).unwrap();
    let (out, _) = run("true.cwasm");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("true.cwasm"), "{stderr}");

    #[cfg(not(feature = "cross"))]
    {
        let out = compile(
            "{p1}",
            "arm.cwasm",
            &["--target", "aarch64-unknown-linux-gnu"],
        );
        assert_eq!(out.status.code(), Some(2));
        assert!(
            text(&out.stderr).contains("build it with `--features cross`"),
            "{}",
            text(&out.stderr)
        );
    }
}

fn events_of(path: &Path, reason: &str) -> Vec<Value> {
    events(path)
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}
