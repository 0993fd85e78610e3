//! Registry images: a real `docker-registry` on loopback, images pushed by the test (wasm
//! artifacts and ordinary images, retagged with skopeo), pulled by the node with the kubelet's
//! policies, events and states.

use std::time::Duration;

use wasmpod::k8s_openapi::api::core::v1::PodStatus;
use wasmpod::{ImageGc, NodeOptions, PodHandle, Reason};
use wasmpod_tests::registry::{Registry, pull_secret};
use wasmpod_tests::{
    PodYaml, TestNode, Timeline, guests, log_lines, remove, running, wait_for, waiting_reason,
};

const LIMIT: Duration = Duration::from_secs(30);

fn p1() -> Vec<u8> {
    std::fs::read(guests::AGNHOST_P1).unwrap()
}

/// A node that may pull from `registry` over plain HTTP, with fast backoffs.
fn node(registry: &Registry) -> TestNode {
    let host = registry.host.clone();
    TestNode::with(move |o: NodeOptions| o.insecure_registry(host))
}

fn pod(name: &str, image: &str, more: &str) -> String {
    let mut pod = PodYaml::new(name).never();
    if !more.is_empty() {
        pod = pod.spec(more);
    }
    pod.container(&format!(
        "{{ name: c, image: \"{image}\", args: [print, hi] }}"
    ))
    .build()
}

async fn ended(pod: &PodHandle) -> PodStatus {
    match tokio::time::timeout(LIMIT, pod.wait()).await {
        Ok(status) => status,
        Err(_) => panic!("the pod did not end:\n{}", Timeline::so_far(pod).await),
    }
}

fn out(pod: &PodHandle) -> Vec<String> {
    log_lines(pod, "c")
}

async fn messages(pod: &PodHandle, reason: Reason) -> Vec<String> {
    Timeline::so_far(pod)
        .await
        .0
        .iter()
        .filter(|e| e.reason == reason)
        .map(|e| e.message.clone())
        .collect()
}

/// Starts a pod of `image` on `node` whose pull must fail: the message of its first `Failed`
/// event, once the container waits in `ImagePullBackOff` (the pod is deleted).
async fn pull_failure(node: &TestNode, name: &str, image: &str) -> String {
    let p = node.start(&pod(name, image, "")).await;
    wait_for(&p, LIMIT, |s| {
        waiting_reason(s, "c").as_deref() == Some("ImagePullBackOff")
    })
    .await;
    let failed = messages(&p, Reason::Failed).await;
    p.delete(Some(Duration::ZERO));
    failed[0].clone()
}

/// A wasm artifact and an ordinary image run; an ordinary image's `.wasm` is the one its
/// entry point names, `args` replacing its `Cmd`; the status names the image and its digest.
#[tokio::test]
async fn wasm_artifacts_and_ordinary_images_run() {
    let registry = Registry::start(false);
    let digest = registry.push_wasm("app:1.0", &p1()).await;
    registry
        .push_image(
            "tool:1.0",
            &[("bin/tool.wasm", &p1())],
            &["/bin/tool.wasm", "print", "from-entrypoint"],
            &["print", "from-cmd"],
        )
        .await;
    let node = node(&registry);
    let host = &registry.host;

    let app = node
        .start(&pod("app", &format!("{host}/app:1.0"), ""))
        .await;
    let status = ended(&app).await;
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:#?}");
    assert_eq!(out(&app), ["hi"]);
    let c = &status.container_statuses.as_ref().unwrap()[0];
    assert_eq!(c.image, format!("{host}/app:1.0"));
    assert_eq!(c.image_id, format!("{host}/app@{digest}"));
    assert_eq!(
        messages(&app, Reason::Pulling).await,
        [format!("Pulling image \"{host}/app:1.0\"")]
    );
    let pulled = messages(&app, Reason::Pulled).await;
    assert!(
        pulled[0].starts_with(&format!("Successfully pulled image \"{host}/app:1.0\" in ")),
        "{pulled:?}"
    );

    // No args: the entry point and then Cmd.
    let tool = PodYaml::new("tool")
        .never()
        .container(&format!("{{ name: c, image: \"{host}/tool:1.0\" }}"))
        .build();
    let tool = node.start(&tool).await;
    assert_eq!(ended(&tool).await.phase.as_deref(), Some("Succeeded"));
    assert_eq!(out(&tool), ["from-entrypoint", "from-cmd"]);
    // args replace Cmd.
    let replaced = node
        .start(&pod("replaced", &format!("{host}/tool:1.0"), ""))
        .await;
    assert_eq!(ended(&replaced).await.phase.as_deref(), Some("Succeeded"));
    assert_eq!(out(&replaced), ["from-entrypoint", "hi"]);
}

/// `IfNotPresent` uses what the node has; `Always` asks the registry each time; `Never` runs
/// only what is there (`ErrImageNeverPull` otherwise); a digest and a tag made by skopeo name
/// the same image.
#[tokio::test]
async fn pull_policies() {
    let registry = Registry::start(false);
    let digest = registry.push_wasm("app:1.0", &p1()).await;
    registry.copy("app:1.0", "app:2.0");
    let node = node(&registry);
    let host = &registry.host;
    let first = node
        .start(&pod("first", &format!("{host}/app:1.0"), ""))
        .await;
    ended(&first).await;

    let again = node
        .start(&pod("again", &format!("{host}/app:1.0"), ""))
        .await;
    ended(&again).await;
    assert!(messages(&again, Reason::Pulling).await.is_empty());
    assert_eq!(
        messages(&again, Reason::Pulled).await,
        [format!(
            "Container image \"{host}/app:1.0\" already present on machine"
        )]
    );

    let always = PodYaml::new("always")
        .never()
        .container(&format!(
            "{{ name: c, image: \"{host}/app:1.0\", imagePullPolicy: Always, args: [print, hi] }}"
        ))
        .build();
    let always = node.start(&always).await;
    ended(&always).await;
    assert_eq!(messages(&always, Reason::Pulling).await.len(), 1);

    let by_digest = node
        .start(&pod("digest", &format!("{host}/app@{digest}"), ""))
        .await;
    assert_eq!(ended(&by_digest).await.phase.as_deref(), Some("Succeeded"));
    let retagged = node
        .start(&pod("retagged", &format!("{host}/app:2.0"), ""))
        .await;
    let status = ended(&retagged).await;
    assert_eq!(
        status.container_statuses.unwrap()[0].image_id,
        format!("{host}/app@{digest}")
    );

    let never = |name: &str, tag: &str| {
        PodYaml::new(name)
            .never()
            .container(&format!(
                "{{ name: c, image: \"{host}/app:{tag}\", imagePullPolicy: Never, args: [print, hi] }}"
            ))
            .build()
    };
    let present = node.start(&never("present", "1.0")).await;
    assert_eq!(ended(&present).await.phase.as_deref(), Some("Succeeded"));
    let absent = node.start(&never("absent", "9.9")).await;
    let s = wait_for(&absent, LIMIT, |s| {
        waiting_reason(s, "c").as_deref() == Some("ErrImageNeverPull")
    })
    .await;
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert!(messages(&absent, Reason::Failed).await.contains(&format!(
        "Container image \"{host}/app:9.9\" is not present with pull policy of Never"
    )));
    absent.delete(Some(Duration::ZERO));
}

/// An unknown image, a wrong digest, a corrupt blob and a registry reached over HTTPS that
/// only speaks HTTP fail the pull: `ErrImagePull`, then `ImagePullBackOff` under the backoff;
/// nothing of a refused pull is kept.
#[tokio::test]
async fn failed_pulls_back_off_and_keep_nothing() {
    let registry = Registry::start(false);
    let wasm = p1();
    registry.push_wasm("app:1.0", &wasm).await;
    registry
        .push_wasm("corrupt:1.0", &wasm[..wasm.len() - 1])
        .await;
    let corrupt = Registry::layer_digest(&wasm[..wasm.len() - 1]);
    std::fs::write(registry.blob_file(&corrupt), b"not what the digest says").unwrap();
    let node = node(&registry);
    let host = &registry.host;
    let zero = format!("sha256:{}", "0".repeat(64));
    for (name, image) in [
        ("unknown", format!("{host}/nothing:1.0")),
        ("wrong-digest", format!("{host}/app@{zero}")),
        ("corrupt", format!("{host}/corrupt:1.0")),
    ] {
        let p = node.start(&pod(name, &image, "")).await;
        let s = wait_for(&p, LIMIT, |s| {
            waiting_reason(s, "c").as_deref() == Some("ImagePullBackOff")
        })
        .await;
        assert_eq!(s.phase.as_deref(), Some("Pending"), "{name}");
        let failed = messages(&p, Reason::Failed).await;
        assert!(
            failed[0].starts_with(&format!("Failed to pull image \"{image}\": ")),
            "{name}: {failed:?}"
        );
        assert_eq!(failed[1], "Error: ErrImagePull", "{name}");
        assert!(
            failed.contains(&"Error: ImagePullBackOff".to_owned()),
            "{name}"
        );
        assert_eq!(
            messages(&p, Reason::BackOff).await[0],
            format!("Back-off pulling image \"{image}\"")
        );
        p.delete(Some(Duration::ZERO));
    }
    // The corrupt blob was refused: a pod asking never to pull finds nothing.
    let never = PodYaml::new("never")
        .never()
        .container(&format!(
            "{{ name: c, image: \"{host}/corrupt:1.0\", imagePullPolicy: Never }}"
        ))
        .build();
    let never = node.start(&never).await;
    wait_for(&never, LIMIT, |s| {
        waiting_reason(s, "c").as_deref() == Some("ErrImageNeverPull")
    })
    .await;
    never.delete(Some(Duration::ZERO));

    // Without --insecure-registry the node speaks HTTPS to it, and fails.
    let strict = TestNode::new();
    let p = strict
        .start(&pod("strict", &format!("{host}/app:1.0"), ""))
        .await;
    wait_for(&p, LIMIT, |s| {
        waiting_reason(s, "c").as_deref() == Some("ImagePullBackOff")
    })
    .await;
    p.delete(Some(Duration::ZERO));
}

/// A registry that wants credentials: refused without them, pulled with the pod's
/// `imagePullSecrets`.
#[tokio::test]
async fn credentials_come_from_pull_secrets() {
    let registry = Registry::start(true);
    registry.push_wasm("private:1.0", &p1()).await;
    let node = node(&registry);
    let host = &registry.host;
    let image = format!("{host}/private:1.0");
    let anonymous = node.start(&pod("anonymous", &image, "")).await;
    wait_for(&anonymous, LIMIT, |s| {
        waiting_reason(s, "c").as_deref() == Some("ImagePullBackOff")
    })
    .await;
    anonymous.delete(Some(Duration::ZERO));
    let with = pod("with", &image, "imagePullSecrets: [ { name: regcred } ]")
        + &pull_secret("regcred", host, "puller", "s3cret");
    let with = node.start(&with).await;
    assert_eq!(ended(&with).await.phase.as_deref(), Some("Succeeded"));
    // A secret the pod was not given is no error: the kubelet warns and goes on without it
    // (here the image is on the node already, so the pod runs).
    let missing = node
        .start(&pod(
            "missing",
            &image,
            "imagePullSecrets: [ { name: nope } ]",
        ))
        .await;
    assert_eq!(ended(&missing).await.phase.as_deref(), Some("Succeeded"));
    assert_eq!(
        messages(&missing, Reason::FailedToRetrieveImagePullSecret).await,
        [
            "Unable to retrieve some image pull secrets (nope); attempting to pull the image may \
          not succeed."
        ]
    );
    missing.delete(Some(Duration::ZERO));
}

/// Twenty pods of one image at once: one download.
#[tokio::test]
async fn one_pull_for_many_pods() {
    let registry = Registry::start(false);
    registry.push_wasm("shared:1.0", &p1()).await;
    let layer = Registry::layer_digest(&p1());
    let node = node(&registry);
    let image = format!("{}/shared:1.0", registry.host);
    let mut pods = Vec::new();
    for i in 0..20 {
        pods.push(node.start(&pod(&format!("p{i}"), &image, "")).await);
    }
    for p in &pods {
        assert_eq!(ended(p).await.phase.as_deref(), Some("Succeeded"));
    }
    assert_eq!(registry.blob_gets(&layer), 1);
}

/// Past the store's high threshold, the images no pod uses go, least recently used first;
/// an image in use stays.
#[tokio::test]
async fn unused_images_are_garbage_collected() {
    let registry = Registry::start(false);
    let wasm = p1();
    // Three distinct images of about the guest's size.
    for (i, tag) in ["a", "b", "c"].iter().enumerate() {
        let mut bytes = wasm.clone();
        // A custom section makes each image distinct and still a valid module.
        bytes.extend_from_slice(&[0, 2, 1, b'0' + i as u8]);
        registry.push_wasm(&format!("gc:{tag}"), &bytes).await;
    }
    let host = registry.host.clone();
    let size = wasm.len() as u64;
    let node = TestNode::with(|o: NodeOptions| {
        o.insecure_registry(host).image_gc(ImageGc {
            limit: size * 5 / 2,
            high_percent: 85,
            low_percent: 50,
        })
    });
    let host = &registry.host;
    let sleeper = PodYaml::new("in-use")
        .container(&format!(
            "{{ name: c, image: \"{host}/gc:a\", args: [print, up, sleep, \"600000\"] }}"
        ))
        .build();
    let in_use = node.start(&sleeper).await;
    running(&in_use, &["c"]).await;
    let b = node.start(&pod("b", &format!("{host}/gc:b"), "")).await;
    ended(&b).await;
    b.delete(None);
    b.deleted().await;
    // The third pull takes the store past 85 % of 2.5 images: `b` (unused) goes, `a` stays.
    let c = node.start(&pod("c", &format!("{host}/gc:c"), "")).await;
    ended(&c).await;
    let refs = std::fs::read_dir(node.dir.path().join("images/refs"))
        .unwrap()
        .count();
    assert_eq!(refs, 2, "a (in use) and c (just pulled) remain");
    let never = |name: &str, tag: &str| {
        PodYaml::new(name)
            .never()
            .container(&format!(
                "{{ name: c, image: \"{host}/gc:{tag}\", imagePullPolicy: Never, args: [print, hi] }}"
            ))
            .build()
    };
    let gone = node.start(&never("gone", "b")).await;
    wait_for(&gone, LIMIT, |s| {
        waiting_reason(s, "c").as_deref() == Some("ErrImageNeverPull")
    })
    .await;
    gone.delete(Some(Duration::ZERO));
    let kept = node.start(&never("kept", "a")).await;
    assert_eq!(ended(&kept).await.phase.as_deref(), Some("Succeeded"));
    in_use.delete(Some(Duration::ZERO));
}

/// An image config whose `Entrypoint` is megabytes long is refused at the pull with a message
/// (its argv would otherwise be the container's, shown in its status), and nothing runs.
#[tokio::test]
async fn an_oversized_entrypoint_is_refused() {
    let registry = Registry::start(false);
    let wasm = p1();
    let huge = "x".repeat(1 << 20);
    let entrypoint: Vec<&str> = vec!["/app.wasm", &huge, &huge, &huge];
    registry
        .push_image("big:1.0", &[("app.wasm", &wasm)], &entrypoint, &[])
        .await;
    let node = node(&registry);
    let image = format!("{}/big:1.0", registry.host);
    let failed = pull_failure(&node, "big", &image).await;
    assert!(
        failed.contains("Entrypoint and Cmd hold") && failed.len() < 1024,
        "{:?}",
        failed.get(..200)
    );
}

/// A pull does not outlive its pod: deleting a pod whose image a registry never sends closes
/// the connection to the registry at once (not at the pull's read timeout).
#[tokio::test]
async fn a_deleted_pods_pull_is_cancelled() {
    use tokio::io::AsyncReadExt;
    let stalling = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = stalling.local_addr().unwrap().to_string();
    let node = TestNode::with({
        let host = host.clone();
        move |o: NodeOptions| o.insecure_registry(host)
    });
    let pod = node
        .start(&pod("stalled", &format!("{host}/app:1.0"), ""))
        .await;
    // The registry takes the connection and the request, and never answers.
    let (mut conn, _) = tokio::time::timeout(LIMIT, stalling.accept())
        .await
        .expect("the pull never connected")
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = conn.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /v2/"));
    remove(&pod).await;
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the deleted pod's pull kept its connection");
}

/// A registry that answers with an endless body: the manifest (`200 OK`), an error (`404`), or,
/// behind a bearer challenge, its token server (`token`). Gives the bytes it sent.
async fn flooding_registry(what: &'static str) -> (String, tokio::task::JoinHandle<u64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let sent = tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut head = [0u8; 4096];
            let n = conn.read(&mut head).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&head[..n]).into_owned();
            if what == "token" && !head.starts_with("GET /token") {
                let challenge = format!(
                    "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\nwww-authenticate: \
                     Bearer realm=\"http://{}/token\",service=\"flood\"\r\n\r\n",
                    listener.local_addr().unwrap()
                );
                conn.write_all(challenge.as_bytes()).await.unwrap();
                continue;
            }
            let status = if what == "404" {
                "404 Not Found"
            } else {
                "200 OK"
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n\
                 transfer-encoding: chunked\r\n\r\n"
            );
            conn.write_all(answer.as_bytes()).await.unwrap();
            // 64 MiB at most (so a reader without a bound ends instead of exhausting the
            // test machine), in 64 KiB chunks of spaces: until the reader hangs up.
            let chunk = format!("10000\r\n{}\r\n", " ".repeat(0x10000));
            let mut sent = 0u64;
            while sent < 64 << 20 && conn.write_all(chunk.as_bytes()).await.is_ok() {
                sent += 0x10000;
            }
            return sent;
        }
    });
    (host, sent)
}

/// A registry is hostile input: a manifest, an error body or a token answer without end is
/// read only to its bound (4 MiB, 4 KiB, 64 KiB), the pull fails with a short message, and the
/// node hangs up instead of taking the rest.
#[tokio::test]
async fn a_registry_flood_is_cut_at_its_bound() {
    for (what, says) in [
        ("manifest", "sent more than 4194304 bytes: refused"),
        ("404", "404 Not Found"),
        ("token", "/token sent more than 65536 bytes: refused"),
    ] {
        let (host, sent) = flooding_registry(what).await;
        let node = TestNode::with({
            let host = host.clone();
            move |o: NodeOptions| o.insecure_registry(host)
        });
        let failed = pull_failure(&node, "flood", &format!("{host}/app:1.0")).await;
        assert!(
            failed.contains(says) && failed.len() < 1024,
            "{what}: {:?}",
            failed.get(..300)
        );
        let sent = tokio::time::timeout(LIMIT, sent).await.unwrap().unwrap();
        // What the node read, and what loopback's socket buffers held when it hung up.
        assert!(sent < 16 << 20, "{what}: the node took {sent} bytes");
    }
}

/// A registry image may carry machine code from `wasmpod compile` beside its portable `.wasm`,
/// one layer per target and address-space mode: a node that trusts the registry with machine
/// code runs the layer for its own target and mode; one that does not takes the portable layer,
/// and refuses an image that has only machine code, saying which option would trust it.
#[tokio::test]
async fn precompiled_layers_run_only_from_trusted_registries() {
    let registry = Registry::start(false);
    let host = registry.host.clone();
    let wasm = p1();
    let artefact = wasmpod::compile(
        std::path::Path::new("p1.wasm"),
        &wasm,
        &wasmpod::CompileTarget::host(),
    )
    .unwrap();
    let artefact_len = artefact.len();
    assert_ne!(artefact_len, wasm.len());
    let here = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let precompiled = "application/vnd.wasmpod.precompiled.v1";
    let for_here: &[(&str, &str)] = &[
        ("dev.wasmpod.target", &here),
        ("dev.wasmpod.address-space", "reserved"),
    ];
    let for_arm: &[(&str, &str)] = &[
        ("dev.wasmpod.target", "aarch64-unknown-linux-gnu"),
        ("dev.wasmpod.address-space", "reserved"),
    ];
    registry
        .push_layers(
            "both:1.0",
            vec![
                (b"not for this node".to_vec(), precompiled, for_arm),
                (artefact.clone(), precompiled, for_here),
                (wasm.clone(), "application/wasm", &[]),
            ],
        )
        .await;
    registry
        .push_layers(
            "machine:1.0",
            vec![(artefact.clone(), precompiled, for_here)],
        )
        .await;
    // Machine code disguised as a portable layer.
    registry
        .push_layers("disguised:1.0", vec![(artefact, "application/wasm", &[])])
        .await;

    let trusting = TestNode::with({
        let host = host.clone();
        move |o: NodeOptions| o.insecure_registry(host.clone()).precompiled_registry(host)
    });
    for image in ["both:1.0", "machine:1.0"] {
        let p = trusting
            .start(&pod(
                &image.replace([':', '.'], "-"),
                &format!("{host}/{image}"),
                "",
            ))
            .await;
        assert_eq!(ended(&p).await.phase.as_deref(), Some("Succeeded"));
        assert_eq!(out(&p), ["hi"]);
        // What was pulled is the machine code, not the portable layer.
        let pulled = messages(&p, Reason::Pulled).await;
        assert!(
            pulled[0].ends_with(&format!("Image size: {artefact_len} bytes.")),
            "{image}: {pulled:?}"
        );
    }

    let wary = node(&registry);
    let p = wary
        .start(&pod("wary", &format!("{host}/both:1.0"), ""))
        .await;
    assert_eq!(ended(&p).await.phase.as_deref(), Some("Succeeded"));
    assert_eq!(out(&p), ["hi"]);
    let pulled = messages(&p, Reason::Pulled).await;
    assert!(
        pulled[0].ends_with(&format!("Image size: {} bytes.", wasm.len())),
        "{pulled:?}"
    );
    let failed = pull_failure(&wary, "refused", &format!("{host}/machine:1.0")).await;
    assert!(
        failed.contains(&format!("--precompiled-registry {host}")),
        "{failed}"
    );
    let failed = pull_failure(&wary, "disguised", &format!("{host}/disguised:1.0")).await;
    assert!(
        failed.contains(
            "is machine code (a precompiled artefact), which this node runs only from a \
             precompiled layer of a registry it trusts with it"
        ),
        "{failed}"
    );
}

/// Images under a signed prefix run only with a cosign signature by the node's key: unsigned,
/// signed with another key, and tampered with (the tag moved to other content after signing)
/// each wait in `SignatureValidationFailed` with the reason, then `ImagePullBackOff`, and run
/// nothing; a signed one runs, and images outside the prefix need no signature. A stored image
/// pulled before the node required a signature is checked again.
#[tokio::test]
async fn signed_prefixes_run_only_what_their_key_signed() {
    use wasmpod_tests::cosign::Signer;
    let registry = Registry::start(false);
    let (ours, theirs) = (Signer::new(), Signer::new());
    let signed = registry.push_wasm("signed/app:1.0", &p1()).await;
    registry.sign(&ours, "signed/app", &signed).await;
    let other = registry.push_wasm("signed/other:1.0", &p1()).await;
    registry.sign(&theirs, "signed/other", &other).await;
    registry.push_wasm("signed/bare:1.0", &p1()).await;
    registry.push_wasm("free/app:1.0", &p1()).await;
    let host = registry.host.clone();
    let key = wasmpod::VerifyKey::from_pem(ours.public_pem().as_bytes()).unwrap();
    let prefix = format!("{host}/signed");
    let node =
        TestNode::with(move |o: NodeOptions| o.insecure_registry(host).signed_images(prefix, key));
    let h = &registry.host;

    let p = node
        .start(&pod("signed", &format!("{h}/signed/app:1.0"), ""))
        .await;
    assert_eq!(ended(&p).await.phase.as_deref(), Some("Succeeded"));
    assert_eq!(out(&p), ["hi"]);
    let p = node
        .start(&pod("free", &format!("{h}/free/app:1.0"), ""))
        .await;
    assert_eq!(ended(&p).await.phase.as_deref(), Some("Succeeded"));

    for (name, image, why) in [
        ("bare", "signed/bare:1.0", "has no cosign signature tag"),
        ("other", "signed/other:1.0", "not made with the key"),
    ] {
        let p = node.start(&pod(name, &format!("{h}/{image}"), "")).await;
        let failed = refused(&p).await;
        assert!(
            failed
                .iter()
                .any(|m| m.contains("signature: ") && m.contains(why)),
            "{failed:?}"
        );
        p.delete(Some(Duration::ZERO));
    }

    // The tag moves to other content after it was signed: the signature names the old digest.
    registry
        .push_image(
            "signed/app:1.0",
            &[("app.wasm", &p1())],
            &["/app.wasm"],
            &[],
        )
        .await;
    let p = node
        .start(&pod("moved", &format!("{h}/signed/app:1.0"), ""))
        .await;
    // `IfNotPresent` runs what the store holds (checked when it was pulled); `Always` asks again.
    assert_eq!(ended(&p).await.phase.as_deref(), Some("Succeeded"));
    let always = PodYaml::new("always")
        .never()
        .container(&format!(
            "{{ name: c, image: \"{h}/signed/app:1.0\", imagePullPolicy: Always, args: [print, hi] }}"
        ))
        .build();
    let p = node.start(&always).await;
    let failed = refused(&p).await;
    assert!(
        failed.iter().any(|m| m.contains("is not signed")),
        "{failed:?}"
    );
    p.delete(Some(Duration::ZERO));
}

/// An image pulled while the node required no signature is not run unchecked once it does.
#[tokio::test]
async fn a_stored_unchecked_image_is_checked_when_a_signature_is_required() {
    use wasmpod_tests::cosign::Signer;
    let registry = Registry::start(false);
    registry.push_wasm("team/app:1.0", &p1()).await;
    let store = tempfile::tempdir().unwrap();
    let image = format!("{}/team/app:1.0", registry.host);
    let (host, dir) = (registry.host.clone(), store.path().to_owned());
    let first = TestNode::with(move |o: NodeOptions| o.insecure_registry(host).image_dir(dir));
    let p = first.start(&pod("first", &image, "")).await;
    assert_eq!(ended(&p).await.phase.as_deref(), Some("Succeeded"));
    drop(first);
    let key = wasmpod::VerifyKey::from_pem(Signer::new().public_pem().as_bytes()).unwrap();
    let (host, dir, prefix) = (
        registry.host.clone(),
        store.path().to_owned(),
        format!("{}/team/", registry.host),
    );
    let second = TestNode::with(move |o: NodeOptions| {
        o.insecure_registry(host)
            .image_dir(dir)
            .signed_images(prefix, key)
    });
    let p = second.start(&pod("second", &image, "")).await;
    refused(&p).await;
}

/// The `Failed` events of a pod whose image the node refuses unsigned, once its container
/// waits out the image backoff: the kubelet's `Error: SignatureValidationFailed` among them.
async fn refused(p: &PodHandle) -> Vec<String> {
    wait_for(p, LIMIT, |s| {
        waiting_reason(s, "c").as_deref() == Some("ImagePullBackOff")
    })
    .await;
    let failed = messages(p, Reason::Failed).await;
    assert!(
        failed.contains(&"Error: SignatureValidationFailed".to_owned()),
        "{failed:?}"
    );
    assert!(messages(p, Reason::Started).await.is_empty(), "it ran");
    failed
}

/// `Node::pull_artifact`: an artifact whole with its annotations; `None` when it is still the
/// digest the caller has; refused (not unreachable) when larger than asked or not signed with
/// the key; an unreachable registry is not a refusal.
#[tokio::test]
async fn artifacts_are_pulled_whole_checked_and_bounded() {
    use wasmpod_tests::cosign::Signer;
    let registry = Registry::start(true);
    let digest = registry
        .push_flux("fleet:1", &[("a.yaml", "kind: ConfigMap\n")], "main@sha1:1")
        .await;
    let signer = Signer::new();
    registry.sign(&signer, "fleet", &digest).await;
    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("config.json");
    std::fs::write(
        &file,
        format!(
            r#"{{"auths": {{"{}": {{"auth": "cHVsbGVyOnMzY3JldA=="}}}}}}"#,
            registry.host
        ),
    )
    .unwrap();
    let host = registry.host.clone();
    let node =
        TestNode::with(move |o: NodeOptions| o.insecure_registry(host).registry_config(Some(file)));
    let reference = format!("{}/fleet:1", registry.host);
    let key = wasmpod::VerifyKey::from_pem(signer.public_pem().as_bytes()).unwrap();
    let artifact = node
        .node
        .pull_artifact(&reference, Some(&key), 1 << 20, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(artifact.digest, digest);
    assert_eq!(
        artifact.config_media_type,
        "application/vnd.cncf.flux.config.v1+json"
    );
    assert_eq!(
        artifact.annotations["org.opencontainers.image.revision"],
        "main@sha1:1"
    );
    assert_eq!(artifact.layers.len(), 1);
    let again = node
        .node
        .pull_artifact(&reference, None, 1 << 20, Some(&digest))
        .await;
    assert!(again.unwrap().is_none());

    let refused = |e: wasmpod::Error| match e {
        wasmpod::Error::Artifact {
            refused, message, ..
        } => (refused, message),
        other => panic!("{other}"),
    };
    let (is, why) = refused(
        node.node
            .pull_artifact(&reference, None, 10, None)
            .await
            .unwrap_err(),
    );
    assert!(is && why.contains("at most 10"), "{why}");
    let other = wasmpod::VerifyKey::from_pem(Signer::new().public_pem().as_bytes()).unwrap();
    let (is, why) = refused(
        node.node
            .pull_artifact(&reference, Some(&other), 1 << 20, None)
            .await
            .unwrap_err(),
    );
    assert!(is && why.contains("not made with the key"), "{why}");
    drop(registry);
    let (is, why) = refused(
        node.node
            .pull_artifact(&reference, None, 1 << 20, None)
            .await
            .unwrap_err(),
    );
    assert!(!is, "{why}");
}
