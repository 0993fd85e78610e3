//! The installer's edits on real configs (see `testdata/README.md`): the runtime lands where
//! each version reads it, everything else is kept, and a second edit changes nothing.

use super::*;

const V2: &str = include_str!("testdata/containerd-1.x-default-v2.toml");
const V3: &str = include_str!("testdata/containerd-2.x-default-v3.toml");
const V4: &str = include_str!("testdata/containerd-man-v4.toml");
const K3S_GENERATED: &str = include_str!("testdata/k3s-generated-config.toml");
const K3S_TEMPLATE: &str = include_str!("testdata/k3s-user-config.toml.tmpl");

fn shim() -> Runtime {
    Runtime {
        path: "/usr/local/bin/containerd-shim-wasmpod-v1".into(),
        systemd_cgroup: false,
    }
}

/// The runtime's table in `text`, read back by a TOML parser, as containerd would.
fn runtime_in(text: &str, plugin: &str) -> Table {
    let doc: DocumentMut = text.parse().expect("the result is TOML");
    doc["plugins"][plugin]["containerd"]["runtimes"][HANDLER]
        .as_table()
        .unwrap_or_else(|| panic!("no runtime under {plugin} in:\n{text}"))
        .clone()
}

/// The lines `patched` has beyond `original`'s, which must all be there in their order.
fn added_lines<'p>(original: &str, patched: &'p str) -> Vec<(usize, &'p str)> {
    let mut want = original.lines().peekable();
    let mut added = Vec::new();
    for (i, line) in patched.lines().enumerate() {
        if want.peek() == Some(&line) {
            want.next();
        } else {
            added.push((i, line));
        }
    }
    assert_eq!(
        want.next(),
        None,
        "a line of the original is missing from:\n{patched}"
    );
    added
}

#[test]
fn each_version_gets_the_runtime_where_it_reads_it_and_keeps_every_other_line() {
    for (text, version, plugin) in [
        (V2, Version::V2, "io.containerd.grpc.v1.cri"),
        (V3, Version::V3, "io.containerd.cri.v1.runtime"),
        (V4, Version::V4, "io.containerd.cri.v1.runtime"),
    ] {
        assert_eq!(read(text).unwrap().version, version);
        let patched = add(text, &shim()).unwrap().expect("the runtime is added");
        let table = runtime_in(&patched, plugin);
        assert_eq!(
            table["runtime_type"].as_str(),
            Some("io.containerd.wasmpod.v1")
        );
        assert_eq!(
            table["runtime_path"].as_str(),
            Some("/usr/local/bin/containerd-shim-wasmpod-v1")
        );
        assert_eq!(
            table["pod_annotations"]
                .as_array()
                .unwrap()
                .get(0)
                .and_then(|v| v.as_str()),
            Some("wasmpod.dev/*")
        );
        assert!(
            table.get("options").is_none(),
            "runc does not use systemd's driver here"
        );
        // Every line of the original, comments and blank lines among them, is there in its
        // order; the edit added one run of lines: the comment and the runtime's table.
        let added = added_lines(text, &patched);
        let (first, last) = (added[0].0, added[added.len() - 1].0);
        assert_eq!(last - first + 1, added.len(), "{version}: {added:?}");
        assert!(
            added
                .iter()
                .any(|(_, l)| l
                    .starts_with("# wasmpod: added by `containerd-shim-wasmpod-v1 install`")),
            "{added:?}"
        );
        // Again: nothing to do. Removed: the original, byte for byte.
        assert_eq!(add(&patched, &shim()).unwrap(), None, "{version}");
        let removed = remove(&patched).unwrap().expect("the runtime is removed");
        assert!(read(&removed).is_ok());
        assert!(!removed.contains("wasmpod"), "{removed}");
        assert_eq!(remove(&removed).unwrap(), None);
    }
}

#[test]
fn the_v2_default_keeps_its_comments_and_gets_the_runtime_beside_runc() {
    let patched = add(V2, &shim()).unwrap().unwrap();
    let runc = patched
        .find("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]")
        .unwrap();
    let ours = patched
        .find("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.wasmpod]")
        .unwrap();
    let next = patched
        .find("[plugins.\"io.containerd.grpc.v1.cri\".cni]")
        .unwrap();
    assert!(runc < ours && ours < next, "{patched}");
    assert!(patched.contains("# SystemdCgroup enables systemd cgroups."));
}

#[test]
fn the_systemd_cgroup_option_follows_the_default_runtime() {
    let found = read(K3S_GENERATED).unwrap();
    assert_eq!(
        found,
        Found {
            version: Version::V2,
            systemd_cgroup: true
        }
    );
    let systemd = Runtime {
        systemd_cgroup: true,
        ..shim()
    };
    let patched = add(K3S_GENERATED, &systemd).unwrap().unwrap();
    let table = runtime_in(&patched, "io.containerd.grpc.v1.cri");
    assert_eq!(table["options"]["SystemdCgroup"].as_bool(), Some(true));
    // The entry without the option is brought up to date, and then left alone.
    let without = add(K3S_GENERATED, &shim()).unwrap().unwrap();
    let updated = add(&without, &systemd)
        .unwrap()
        .expect("the option is added");
    assert_eq!(
        runtime_in(&updated, "io.containerd.grpc.v1.cri")["options"]["SystemdCgroup"].as_bool(),
        Some(true)
    );
    assert_eq!(add(&updated, &systemd).unwrap(), None);
    // A default runtime other than runc is the one read.
    let crun = V3.replace(
        "default_runtime_name = 'runc'",
        "default_runtime_name = 'crun'\n\n      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.crun.options]\n        SystemdCgroup = true",
    );
    assert!(read(&crun).unwrap().systemd_cgroup);
    assert!(!read(V3).unwrap().systemd_cgroup);
}

/// The config Debian's containerd 1.6 package installs: the CRI plugin's CNI paths, nothing
/// about runtimes (runc is containerd's default).
const DEBIAN: &str = r#"version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"#;

#[test]
fn a_version_2_config_that_leaves_runc_to_the_defaults_keeps_runc() {
    // containerd 1.x reads a runtimes table as the whole list: with `wasmpod` alone in it, the
    // CRI plugin fails to load ("no corresponding runtime configured in `containerd.runtimes`
    // for `containerd` `default_runtime_name = "runc"`").
    for (text, removed) in [(DEBIAN, DEBIAN), ("", "version = 2\n")] {
        let patched = add(text, &shim()).unwrap().unwrap();
        let doc: DocumentMut = patched.parse().unwrap();
        let runtimes = &doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"];
        assert_eq!(
            runtimes["runc"]["runtime_type"].as_str(),
            Some("io.containerd.runc.v2"),
            "{patched}"
        );
        assert!(runtimes[HANDLER].is_table());
        assert_eq!(
            add(&patched, &shim()).unwrap(),
            None,
            "a second edit changes nothing"
        );
        // Uninstall takes out what install wrote, runc's table with it.
        assert_eq!(remove(&patched).unwrap().as_deref(), Some(removed));
    }
    // A config that lists runc, or names another default, is given `wasmpod` alone; and a runc
    // table the user wrote stays when the shim's goes.
    for (text, plugin) in [
        (V2, "io.containerd.grpc.v1.cri"),
        (V3, "io.containerd.cri.v1.runtime"),
        (V4, "io.containerd.cri.v1.runtime"),
    ] {
        let patched = add(text, &shim()).unwrap().unwrap();
        assert!(!patched.contains("written out beside"), "{plugin}");
        assert_eq!(remove(&patched).unwrap().as_deref(), Some(text));
    }
    let crun = DEBIAN.replace(
        "[plugins.\"io.containerd.grpc.v1.cri\"]\n",
        "[plugins.\"io.containerd.grpc.v1.cri\"]\n    [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n      default_runtime_name = \"crun\"\n",
    );
    assert!(
        !add(&crun, &shim())
            .unwrap()
            .unwrap()
            .contains("runtimes.runc]")
    );
}

#[test]
fn an_empty_or_missing_config_gets_a_version_2_one() {
    let made = add("", &shim()).unwrap().unwrap();
    assert!(made.starts_with("version = 2\n"), "{made}");
    runtime_in(&made, "io.containerd.grpc.v1.cri");
    let commented = add("# nothing here yet\n", &shim()).unwrap().unwrap();
    assert!(commented.contains("# nothing here yet"));
}

#[test]
fn a_config_it_cannot_read_or_that_has_another_wasmpod_is_refused() {
    let clash = format!(
        "{V3}\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.wasmpod]\n  runtime_type = 'io.containerd.runc.v2'\n"
    );
    for (text, wanted) in [
        ("version = 2\n[plugins\n", "is not TOML"),
        ("[plugins.cri]\n  sandbox_image = 'x'\n", "has no `version`"),
        ("version = 5\n", "`version = 5`"),
        (clash.as_str(), "runtime_type is `io.containerd.runc.v2`"),
        (
            "version = 3\nplugins = 'no'\n",
            "has `plugins` as something other than a table",
        ),
    ] {
        let error = add(text, &shim()).unwrap_err().to_string();
        assert!(error.contains(wanted), "{error}");
    }
    // Not the shim's: uninstall leaves it.
    assert_eq!(remove(&clash).unwrap(), None);
}

/// What k3s makes of a template that starts with `{{ template "base" . }}`: the base, then the
/// rest (rendering the shim's block changes nothing: it has no template directives).
fn render(template: &str, base: &str) -> String {
    template.replace("{{ template \"base\" . }}", base)
}

#[test]
fn a_k3s_node_without_a_template_gets_one_on_the_base_template() {
    let template = add_to_template(None, K3S_GENERATED, &shim())
        .unwrap()
        .unwrap();
    assert!(
        template.starts_with("{{ template \"base\" . }}\n"),
        "{template}"
    );
    let rendered = render(&template, K3S_GENERATED);
    let table = runtime_in(&rendered, "io.containerd.grpc.v1.cri");
    assert_eq!(
        table["runtime_type"].as_str(),
        Some("io.containerd.wasmpod.v1")
    );
    assert!(
        table.get("options").is_none(),
        "the caller said runc has no SystemdCgroup"
    );
    // The generated config read again (after k3s's restart) has it; a second run adds nothing.
    assert_eq!(
        add_to_template(Some(&template), &rendered, &shim()).unwrap(),
        None
    );
    assert_eq!(
        remove_from_template(&template).unwrap().as_deref(),
        Some("{{ template \"base\" . }}\n")
    );
}

#[test]
fn a_users_own_k3s_template_keeps_every_byte_and_gets_the_block_after_it() {
    let template = add_to_template(Some(K3S_TEMPLATE), K3S_GENERATED, &shim())
        .unwrap()
        .unwrap();
    assert!(template.starts_with(K3S_TEMPLATE));
    assert_eq!(
        remove_from_template(&template).unwrap().as_deref(),
        Some(K3S_TEMPLATE),
        "the block comes out byte for byte"
    );
    // A version 3 node (k3s with containerd 2) gets the block in version 3's place.
    let v3 = add_to_template(None, V3, &shim()).unwrap().unwrap();
    runtime_in(&render(&v3, V3), "io.containerd.cri.v1.runtime");
    // A template whose block lost a marker is refused.
    let broken = template.replace("# END wasmpod\n", "");
    assert_eq!(
        add_to_template(Some(&broken), K3S_GENERATED, &shim()),
        Err(ConfigError::Markers)
    );
    // A generated config where another runtime is named wasmpod: refused.
    let clash = format!(
        "{K3S_GENERATED}\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.\"wasmpod\"]\n  runtime_type = \"io.containerd.spin.v2\"\n"
    );
    assert!(matches!(
        add_to_template(None, &clash, &shim()),
        Err(ConfigError::Clash(_))
    ));
}
