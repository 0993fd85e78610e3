//! Admission's decisions as tables: a node of given resources, pods submitted, leaving and
//! released, and the actions each change leads to, in the scheduler's words (Kubernetes'
//! scheduler messages, as `docs/pod-spec.md` quotes them).

use super::*;

const MIB: u64 = 1 << 20;

/// A node's queue, its pods known by name (a pod's key is its order of submission).
struct Node {
    queue: Queue,
    names: Vec<String>,
}

/// A pod as a test submits it.
struct Pod {
    name: &'static str,
    priority: i32,
    memory_mib: u64,
    preempts: bool,
    unselected: Option<&'static str>,
    /// More of the Pod's YAML: its labels and `affinity`, under `metadata` and `spec`.
    labels: &'static str,
    affinity: String,
}

fn pod(name: &'static str, priority: i32, memory_mib: u64) -> Pod {
    Pod {
        name,
        priority,
        memory_mib,
        preempts: true,
        unselected: None,
        labels: "{}",
        affinity: String::new(),
    }
}

fn spec(p: &Pod) -> Arc<PodSpec> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {}, labels: {}}}\nspec:\n  containers: \
         [{{name: c, image: a.wasm}}]\n{}",
        p.name, p.labels, p.affinity
    );
    Arc::new(PodSpec::from_yaml(&yaml, dir.path()).unwrap())
}

impl Node {
    fn new(memory_mib: u64, pods: u64) -> Node {
        let allocatable = Allocatable {
            memory: memory_mib * MIB,
            cpu_milli: 4000,
            pods,
            containers: 1000,
        };
        let labels = BTreeMap::from([("kubernetes.io/hostname".to_owned(), "n".to_owned())]);
        Node {
            queue: Queue::new(allocatable, "n".into(), Arc::new(labels)),
            names: Vec::new(),
        }
    }

    fn key(&self, name: &str) -> u64 {
        self.names
            .iter()
            .position(|n| n == name)
            .expect("a pod of the test") as u64
            + 1
    }

    /// The actions as lines: `admit NAME`, `wait NAME: MESSAGE`, `nominate NAME: MESSAGE`,
    /// `preempt NAME: MESSAGE`.
    fn lines(&self, actions: Vec<Action>) -> Vec<String> {
        let name = |key: u64| self.names[key as usize - 1].clone();
        actions
            .into_iter()
            .map(|a| match a {
                Action::Admit(key) => format!("admit {}", name(key)),
                Action::Unschedulable {
                    key,
                    message,
                    nominated: false,
                } => format!("wait {}: {message}", name(key)),
                Action::Unschedulable { key, message, .. } => {
                    format!("nominate {}: {message}", name(key))
                }
                Action::Preempt { key, message } => format!("preempt {}: {message}", name(key)),
            })
            .collect()
    }

    fn submit(&mut self, p: Pod) -> Vec<String> {
        self.names.push(p.name.to_owned());
        let key = self.names.len() as u64;
        let seated = Seated {
            spec: spec(&p),
            priority: p.priority,
            preempts: p.preempts,
            requests: Requests {
                memory: p.memory_mib * MIB,
                cpu_milli: 0,
                containers: 1,
            },
            unselected: p.unselected.map(str::to_owned),
        };
        let actions = self.queue.submit(key, seated);
        self.lines(actions)
    }

    fn release(&mut self, name: &str) -> Vec<String> {
        let actions = self.queue.release(self.key(name)).expect("held");
        self.lines(actions)
    }
}

const NO_VICTIMS: &str =
    "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.";
const NOT_HELPFUL: &str =
    "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.";

#[test]
fn pods_are_admitted_while_they_fit_then_wait_and_start_in_priority_order() {
    let mut node = Node::new(1000, 10);
    assert_eq!(node.submit(pod("a", 0, 600)), ["admit a"]);
    assert_eq!(
        node.submit(pod("b", 0, 600)),
        [format!(
            "wait b: 0/1 nodes are available: 1 Insufficient memory. {NO_VICTIMS}"
        )]
    );
    let never = Pod {
        preempts: false,
        ..pod("c", 5, 600)
    };
    assert_eq!(
        node.submit(never),
        [
            "wait c: 0/1 nodes are available: 1 Insufficient memory. preemption: not eligible due \
          to preemptionPolicy=Never."
        ]
    );
    // Room for one: the higher priority first, though it came later; b is not told its
    // reason again.
    assert_eq!(node.release("a"), ["admit c"]);
    assert_eq!(node.release("c"), ["admit b"]);
    // A second release of a pod does nothing.
    assert!(node.queue.release(node.key("c")).is_none());
}

#[test]
fn a_pod_that_may_preempt_has_the_fewest_lowest_pods_deleted_and_its_room_held() {
    let mut node = Node::new(1000, 10);
    assert_eq!(node.submit(pod("low", 0, 500)), ["admit low"]);
    assert_eq!(node.submit(pod("mid", 5, 300)), ["admit mid"]);
    // 200 MiB free: removing low alone makes room, so mid is reprieved.
    assert_eq!(
        node.submit(pod("high", 10, 500)),
        [
            "nominate high: 0/1 nodes are available: 1 Insufficient memory.",
            "preempt low: Preempted by pod default/high on node n",
        ]
    );
    // While low stops, high's room is held: a pod that would fit in it waits, and is not
    // nominated for victims already leaving.
    assert_eq!(
        node.submit(pod("late", 0, 100)),
        [
            "wait late: 0/1 nodes are available: 1 Insufficient memory. preemption: waiting for \
          terminating pods to leave the node."
        ]
    );
    assert_eq!(node.release("low"), ["admit high", "admit late"]);
}

#[test]
fn what_no_preemption_can_help_waits_without_victims() {
    let mut node = Node::new(1000, 1);
    assert_eq!(node.submit(pod("a", 0, 100)), ["admit a"]);
    // The pod count: the same priority finds no victim.
    assert_eq!(
        node.submit(pod("b", 0, 100)),
        [format!(
            "wait b: 0/1 nodes are available: 1 Too many pods. {NO_VICTIMS}"
        )]
    );
    // A node the pod's selector does not match: no preemption, whatever its priority.
    let unselected = Pod {
        unselected: Some("node(s) didn't match Pod's node affinity/selector"),
        ..pod("c", 100, 100)
    };
    assert_eq!(
        node.submit(unselected),
        [format!(
            "wait c: 0/1 nodes are available: 1 node(s) didn't match Pod's node \
             affinity/selector. {NOT_HELPFUL}"
        )]
    );
    assert_eq!(node.release("a"), ["admit b"]);
}

#[test]
fn placement_waits_for_the_pods_it_needs_or_repels() {
    let mut node = Node::new(1000, 10);
    let term = "{labelSelector: {matchLabels: {app: web}}, topologyKey: kubernetes.io/hostname}";
    let web = |name| Pod {
        labels: "{app: web}",
        affinity: format!(
            "  affinity: {{podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: \
             [{term}]}}}}\n"
        ),
        ..pod(name, 0, 100)
    };
    assert_eq!(node.submit(web("web-1")), ["admit web-1"]);
    assert_eq!(
        node.submit(web("web-2")),
        [format!(
            "wait web-2: 0/1 nodes are available: 1 node(s) didn't match pod anti-affinity \
             rules. {NOT_HELPFUL}"
        )]
    );
    assert_eq!(node.release("web-1"), ["admit web-2"]);

    // A pod that needs a pod admitted after it in the same pass: a second pass admits it.
    let db_term = "{labelSelector: {matchLabels: {app: db}}, topologyKey: kubernetes.io/hostname}";
    let follower = Pod {
        affinity: format!(
            "  affinity: {{podAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: \
             [{db_term}]}}}}\n"
        ),
        ..pod("follower", 10, 100)
    };
    assert_eq!(
        node.submit(follower),
        [format!(
            "wait follower: 0/1 nodes are available: 1 node(s) didn't match pod affinity \
             rules. {NOT_HELPFUL}"
        )]
    );
    let db = Pod {
        labels: "{app: db}",
        ..pod("db", 0, 100)
    };
    assert_eq!(node.submit(db), ["admit db", "admit follower"]);
}

#[test]
fn memory_pressure_takes_the_lowest_priority_then_the_furthest_above_its_request() {
    let mut node = Node::new(1000, 10);
    for p in [pod("a", 0, 100), pod("b", 0, 100), pod("c", -5, 100)] {
        node.submit(p);
    }
    // MiB in use: a 300 (200 above), b 150 (50 above), c 90 (within, though lowest).
    let used = |key: u64| [300, 150, 90][key as usize - 1] * MIB;
    let victim = |node: &mut Node| {
        let key = node.queue.pressure_victim(used)?;
        Some(node.names[key as usize - 1].clone())
    };
    assert_eq!(victim(&mut node).as_deref(), Some("a"));
    assert_eq!(victim(&mut node).as_deref(), Some("b"));
    assert_eq!(victim(&mut node), None, "c is within its request");
}

#[test]
fn a_pending_pod_the_node_now_selects_is_admitted_when_the_labels_change() {
    let mut node = Node::new(1000, 10);
    let unselected = |name| Pod {
        unselected: Some("node(s) didn't match Pod's node affinity/selector"),
        ..pod(name, 0, 100)
    };
    node.submit(unselected("a"));
    node.submit(unselected("b"));
    let labels = |pairs: &[(&str, &str)]| {
        Arc::new(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    // The new labels select `b` only (as the node's own filter would say).
    let actions = node
        .queue
        .relabel(labels(&[("wasmpod.dev/installed", "true")]), |spec| {
            (spec.name != "b").then(|| "node(s) didn't match Pod's node affinity/selector".into())
        });
    assert_eq!(node.lines(actions), ["admit b"]);
    assert_eq!(
        node.queue
            .node_labels
            .get("wasmpod.dev/installed")
            .map(String::as_str),
        Some("true")
    );
    // And `a`, when they select it too.
    let actions = node.queue.relabel(labels(&[]), |_| None);
    assert_eq!(node.lines(actions), ["admit a"]);
}
