//! The task API's flows on real guests, without containerd: the service's events go to a list,
//! its requests are made as containerd makes them, and each test asserts on what containerd
//! would see (answers, failures by kind, events in order) and on what the guest wrote.

use std::any::Any;
use std::sync::{Arc, Mutex};

use containerd_shim::ExitSignal;
use containerd_shim::event::Event;
use containerd_shim::protos::events::task::{
    TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskExit, TaskOOM, TaskStart,
};
use containerd_shim::protos::protobuf::well_known_types::any::Any as AnyProto;
use containerd_shim::protos::types::task::Status;
use serde_json::{Value, json};
use wasmpod_tests::guests;

use super::*;

/// The events as lines: `create ID`, `start ID`, `exit ID EXEC CODE`, `oom ID`, `exec-added ID
/// EXEC`, `exec-started ID EXEC`, `delete ID CODE`.
#[derive(Clone, Default)]
struct Recorded(Arc<Mutex<Vec<String>>>);

impl Recorded {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl EventSink for Recorded {
    fn send(&self, event: impl Event + Send + 'static) {
        let any: &dyn Any = &event;
        let line = if let Some(e) = any.downcast_ref::<TaskCreate>() {
            format!("create {}", e.container_id)
        } else if let Some(e) = any.downcast_ref::<TaskStart>() {
            format!("start {}", e.container_id)
        } else if let Some(e) = any.downcast_ref::<TaskExit>() {
            format!("exit {} {} {}", e.container_id, e.id, e.exit_status)
        } else if let Some(e) = any.downcast_ref::<TaskOOM>() {
            format!("oom {}", e.container_id)
        } else if let Some(e) = any.downcast_ref::<TaskExecAdded>() {
            format!("exec-added {} {}", e.container_id, e.exec_id)
        } else if let Some(e) = any.downcast_ref::<TaskExecStarted>() {
            format!("exec-started {} {}", e.container_id, e.exec_id)
        } else if let Some(e) = any.downcast_ref::<TaskDelete>() {
            format!("delete {} {}", e.container_id, e.exit_status)
        } else {
            format!("other {}", event.topic())
        };
        self.0.lock().unwrap().push(line);
    }

    fn flush(&self) {}
}

/// A service, its events recorded, and a directory for its bundles.
struct Shim {
    service: Service<Recorded>,
    events: Recorded,
    dir: tempfile::TempDir,
}

impl Shim {
    fn new() -> Shim {
        let events = Recorded::default();
        let images = Images {
            // No containerd: a guest missing from the root filesystem is not found anywhere.
            address: "/nonexistent/containerd.sock".into(),
            namespace: "test".into(),
        };
        let exit = Arc::new(ExitSignal::default());
        Shim {
            service: Service::new(events.clone(), images, exit, wasmpod_tests::shared_cache()),
            events,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A bundle for container `id`: `guest` as `/app.wasm` in its root filesystem, run with
    /// `words`; `more` merged into config.json (annotations, limits).
    fn bundle(&self, id: &str, guest: &str, words: &[&str], more: Value) -> String {
        let bundle = self.dir.path().join(id);
        std::fs::create_dir_all(bundle.join("rootfs")).unwrap();
        std::fs::copy(guest, bundle.join("rootfs/app.wasm")).unwrap();
        let mut args = vec!["/app.wasm"];
        args.extend(words);
        let mut config = json!({
            "ociVersion": "1.0.2",
            "process": {"args": args, "cwd": "/", "env": [], "user": {"uid": 0, "gid": 0}},
            "root": {"path": "rootfs"},
        });
        if let (Value::Object(config), Value::Object(more)) = (&mut config, more) {
            config.extend(more);
        }
        std::fs::write(bundle.join("config.json"), config.to_string()).unwrap();
        bundle.to_string_lossy().into_owned()
    }

    /// The path a process's stdout goes to (a plain file).
    fn out(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }

    fn create(&self, id: &str, bundle: &str, stdout: &str) -> Result<CreateTaskResponse, Failure> {
        self.service.create_task(CreateTaskRequest {
            id: id.into(),
            bundle: bundle.into(),
            stdout: stdout.into(),
            ..Default::default()
        })
    }

    fn start(&self, id: &str, exec: &str) -> Result<StartResponse, Failure> {
        self.service.start_task(StartRequest {
            id: id.into(),
            exec_id: exec.into(),
            ..Default::default()
        })
    }

    fn kill(&self, id: &str, exec: &str, signal: u32) -> Result<(), Failure> {
        self.service.kill_task(KillRequest {
            id: id.into(),
            exec_id: exec.into(),
            signal,
            ..Default::default()
        })
    }

    fn wait(&self, id: &str, exec: &str) -> u32 {
        self.service
            .wait_for(WaitRequest {
                id: id.into(),
                exec_id: exec.into(),
                ..Default::default()
            })
            .unwrap()
            .exit_status
    }

    fn state(&self, id: &str, exec: &str) -> Result<(Status, u32), Failure> {
        let state = self.service.state_of(StateRequest {
            id: id.into(),
            exec_id: exec.into(),
            ..Default::default()
        })?;
        Ok((state.status.enum_value().unwrap(), state.exit_status))
    }

    fn delete(&self, id: &str, exec: &str) -> Result<u32, Failure> {
        let deleted = self.service.delete_task(DeleteRequest {
            id: id.into(),
            exec_id: exec.into(),
            ..Default::default()
        })?;
        Ok(deleted.exit_status)
    }

    fn exec(&self, id: &str, exec: &str, words: &[&str], stdout: &str) -> Result<(), Failure> {
        let mut args = vec!["/app.wasm"];
        args.extend(words);
        let spec = json!({"args": args, "cwd": "/", "user": {"uid": 0, "gid": 0}});
        self.service.exec_process(ExecProcessRequest {
            id: id.into(),
            exec_id: exec.into(),
            stdout: stdout.into(),
            spec: MessageField::some(AnyProto {
                value: spec.to_string().into_bytes(),
                ..Default::default()
            }),
            ..Default::default()
        })
    }
}

/// containerd's view of a failure: its kind, and its message.
fn kind(failure: Failure) -> (&'static str, String) {
    match failure {
        Failure::NotFound(m) => ("NotFound", m),
        Failure::AlreadyExists(m) => ("AlreadyExists", m),
        Failure::Precondition(m) => ("Precondition", m),
        Failure::Invalid(m) => ("Invalid", m),
        Failure::Other(e) => ("Other", format!("{e:#}")),
    }
}

#[test]
fn a_task_goes_from_create_to_delete_with_an_event_at_each_step() {
    let shim = Shim::new();
    let bundle = shim.bundle(
        "c",
        guests::AGNHOST_P1,
        &["print", "hello", "exit", "3"],
        json!({}),
    );
    let out = shim.out("c.out");
    let pid = shim.create("c", &bundle, &out).unwrap().pid;
    assert_eq!(pid, std::process::id(), "the task's pid is the shim's");
    assert_eq!(shim.state("c", "").unwrap(), (Status::CREATED, 0));
    shim.start("c", "").unwrap();
    assert_eq!(shim.wait("c", ""), 3);
    assert_eq!(shim.state("c", "").unwrap(), (Status::STOPPED, 3));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hello\n");
    // Ended: KILL finds nothing to kill, as containerd expects.
    assert_eq!(kind(shim.kill("c", "", 9).unwrap_err()).0, "NotFound");
    assert_eq!(shim.delete("c", "").unwrap(), 3);
    assert_eq!(
        shim.events.lines(),
        ["create c", "start c", "exit c c 3", "delete c 3"]
    );
    // Deleted: gone for every request.
    assert_eq!(kind(shim.state("c", "").unwrap_err()).0, "NotFound");
    assert_eq!(kind(shim.delete("c", "").unwrap_err()).0, "NotFound");
}

#[test]
fn an_exec_runs_beside_the_entry_point_and_term_ends_the_entry_point() {
    let shim = Shim::new();
    let bundle = shim.bundle("c", guests::AGNHOST_P1, &["sleep", "600000"], json!({}));
    shim.create("c", &bundle, "").unwrap();
    // Nothing to exec in before the entry point runs.
    shim.exec("c", "early", &["print", "x"], "").unwrap();
    let (why, message) = kind(shim.start("c", "early").unwrap_err());
    assert_eq!(
        (why, message.as_str()),
        ("Precondition", "c is not running")
    );
    shim.delete("c", "early").unwrap();
    shim.start("c", "").unwrap();
    assert_eq!(shim.state("c", "").unwrap(), (Status::RUNNING, 0));
    assert_eq!(kind(shim.start("c", "").unwrap_err()).0, "Precondition");

    let out = shim.out("e.out");
    shim.exec("c", "e", &["print", "from exec", "exit", "2"], &out)
        .unwrap();
    assert_eq!(
        kind(shim.exec("c", "e", &["print", "again"], "").unwrap_err()).0,
        "AlreadyExists"
    );
    shim.start("c", "e").unwrap();
    assert_eq!(shim.wait("c", "e"), 2);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "from exec\n");
    assert_eq!(shim.delete("c", "e").unwrap(), 2);
    assert_eq!(kind(shim.state("c", "e").unwrap_err()).0, "NotFound");

    // The entry point still runs; it cannot be deleted so, and only TERM, INT and KILL reach it.
    assert_eq!(shim.state("c", "").unwrap(), (Status::RUNNING, 0));
    assert_eq!(kind(shim.delete("c", "").unwrap_err()).0, "Precondition");
    let (why, message) = kind(shim.kill("c", "", 1).unwrap_err());
    assert_eq!(why, "Invalid");
    assert!(message.contains("not signal 1"), "{message}");
    shim.kill("c", "", 0).unwrap();
    // TERM to a guest without the termination import stops it at once: 143.
    shim.kill("c", "", 15).unwrap();
    assert_eq!(shim.wait("c", ""), 143);
    assert_eq!(shim.delete("c", "").unwrap(), 143);
    assert_eq!(
        shim.events.lines(),
        [
            "create c",
            "exec-added c early",
            "start c",
            "exec-added c e",
            "exec-started c e",
            "exit c e 2",
            "exit c c 143",
            "delete c 143",
        ]
    );
}

#[test]
fn a_guest_past_its_memory_limit_sends_task_oom_before_its_exit() {
    let shim = Shim::new();
    let limit = json!({"linux": {"resources": {"memory": {"limit": 64 << 20}}}});
    let bundle = shim.bundle(
        "c",
        guests::AGNHOST_P1,
        &["alloc", "256", "print", "no"],
        limit,
    );
    let out = shim.out("c.out");
    shim.create("c", &bundle, &out).unwrap();
    shim.start("c", "").unwrap();
    assert_eq!(shim.wait("c", ""), 137);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "");
    // An exec's exit is its own: only the entry point's end is the container's OOM.
    assert_eq!(
        shim.events.lines(),
        ["create c", "start c", "oom c", "exit c c 137"]
    );
}

#[test]
fn kill_of_a_created_task_ends_it_unstarted_and_kill_all_takes_its_execs() {
    let shim = Shim::new();
    let out = shim.out("c.out");
    let bundle = shim.bundle("c", guests::AGNHOST_P1, &["print", "ran"], json!({}));
    shim.create("c", &bundle, &out).unwrap();
    shim.kill("c", "", 9).unwrap();
    assert_eq!(shim.wait("c", ""), 137);
    assert_eq!(kind(shim.start("c", "").unwrap_err()).0, "Precondition");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "");

    let bundle = shim.bundle("d", guests::AGNHOST_P1, &["sleep", "600000"], json!({}));
    shim.create("d", &bundle, "").unwrap();
    shim.start("d", "").unwrap();
    shim.exec("d", "e", &["sleep", "600000"], "").unwrap();
    shim.start("d", "e").unwrap();
    let request = KillRequest {
        id: "d".into(),
        signal: 9,
        all: true,
        ..Default::default()
    };
    shim.service.kill_task(request).unwrap();
    assert_eq!(shim.wait("d", ""), 137);
    assert_eq!(shim.wait("d", "e"), 137);
    let lines = shim.events.lines();
    assert!(lines.contains(&"exit d e 137".to_owned()), "{lines:?}");
    assert!(lines.contains(&"exit d d 137".to_owned()), "{lines:?}");
}

#[test]
fn the_pods_sandbox_container_runs_nothing_until_term() {
    let shim = Shim::new();
    let sandbox = json!({"annotations": {"io.kubernetes.cri.container-type": "sandbox"}});
    let bundle = shim.bundle("pause", guests::AGNHOST_P1, &[], sandbox);
    shim.create("pause", &bundle, "").unwrap();
    shim.start("pause", "").unwrap();
    assert_eq!(shim.state("pause", "").unwrap(), (Status::RUNNING, 0));
    let (why, message) = kind(shim.exec("pause", "e", &["print", "x"], "").unwrap_err());
    assert_eq!(why, "Precondition");
    assert!(message.contains("sandbox"), "{message}");
    shim.kill("pause", "", 15).unwrap();
    assert_eq!(shim.wait("pause", ""), 0);
}

#[test]
fn requests_the_shim_cannot_serve_are_refused_by_kind_with_nothing_made() {
    let shim = Shim::new();
    let bundle = shim.bundle("c", guests::AGNHOST_P1, &["print", "x"], json!({}));
    let tty = shim.service.create_task(CreateTaskRequest {
        id: "c".into(),
        bundle: bundle.clone(),
        terminal: true,
        ..Default::default()
    });
    let (why, message) = kind(tty.unwrap_err());
    assert_eq!(why, "Invalid");
    assert!(message.contains("no terminal (TTY)"), "{message}");
    assert_eq!(kind(shim.start("nothing", "").unwrap_err()).0, "NotFound");
    assert_eq!(kind(shim.kill("nothing", "", 9).unwrap_err()).0, "NotFound");

    // A guest in neither the root filesystem nor containerd's images: the error names both.
    let missing = shim.dir.path().join("missing");
    std::fs::create_dir_all(missing.join("rootfs")).unwrap();
    let config = json!({"ociVersion": "1.0.2", "process": {"args": ["/none.wasm"], "cwd": "/",
        "user": {"uid": 0, "gid": 0}}, "root": {"path": "rootfs"}});
    std::fs::write(missing.join("config.json"), config.to_string()).unwrap();
    let (why, message) = kind(shim.create("m", missing.to_str().unwrap(), "").unwrap_err());
    assert_eq!(why, "Other");
    assert!(message.contains("cannot create m"), "{message}");
    assert!(message.contains("/none.wasm: no such file"), "{message}");
    assert!(message.contains("cannot reach containerd"), "{message}");

    shim.create("c", &bundle, "").unwrap();
    let (why, message) = kind(shim.create("c", &bundle, "").unwrap_err());
    assert_eq!((why, message.as_str()), ("AlreadyExists", "container c"));
    // Only the container made was announced.
    assert_eq!(shim.events.lines(), ["create c"]);
}
