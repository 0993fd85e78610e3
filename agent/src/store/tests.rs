use super::*;
use serde_json::json;

fn object(name: &str) -> Object {
    Object::from_value(json!({"metadata": {"name": name}, "data": {"a": "1"}})).unwrap()
}

#[test]
fn objects_survive_a_reopen_with_their_resource_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    {
        let store = Store::open(&path, &["configmaps"]).unwrap();
        store
            .create("configmaps", "default", "a", object("a"))
            .unwrap();
        store
            .create("configmaps", "default", "b", object("b"))
            .unwrap();
        let updated = store
            .update("configmaps", "default", "a", Durable::Now, |v| {
                v.set_field("data", Some(json!({"a": "2"})));
                Ok(())
            })
            .unwrap();
        assert_eq!(updated.resource_version(), Some("3"));
        // An update that changes nothing is not a write.
        store
            .update("configmaps", "default", "a", Durable::Now, |_| Ok(()))
            .unwrap();
        assert_eq!(store.resource_version(), 3);
        let gone = store.delete_if("configmaps", "default", "b", Durable::Now, |_| true);
        assert_eq!(gone.unwrap().unwrap().resource_version(), Some("4"));
        let e = store
            .create("configmaps", "default", "a", object("a"))
            .unwrap_err();
        assert_eq!(e.reason, "AlreadyExists");
    }
    let store = Store::open(&path, &["configmaps"]).unwrap();
    assert_eq!(store.resource_version(), 4);
    let (rv, items) = store.list("configmaps", Some("default"));
    assert_eq!(rv, 4);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].field("data"), Some(json!({"a": "2"})));
    assert!(store.get("configmaps", "default", "b").is_none());
    let e = store.update("configmaps", "default", "b", Durable::Now, |_| Ok(()));
    assert_eq!(e.unwrap_err().reason, "NotFound");
}

#[test]
fn watches_replay_what_they_missed_and_old_ones_expire() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let store = Store::open(&path, &["configmaps", "secrets"]).unwrap();
    store.create("configmaps", "ns", "a", object("a")).unwrap();
    store.create("secrets", "ns", "s", object("s")).unwrap();
    store.create("configmaps", "ns", "b", object("b")).unwrap();
    // From the start: every current object as ADDED.
    let (backlog, _, _) = store.watch("configmaps", None).unwrap();
    assert_eq!(backlog.len(), 2);
    // From resourceVersion 1: only what came after, of this resource.
    let (backlog, mut rx, _) = store.watch("configmaps", Some(1)).unwrap();
    assert_eq!(backlog.iter().map(|c| c.rv).collect::<Vec<_>>(), [3]);
    store
        .delete_if("configmaps", "ns", "a", Durable::Later, |_| true)
        .unwrap();
    let next = rx.try_recv().unwrap();
    assert_eq!((next.rv, next.kind), (4, ChangeKind::Deleted));
    // After a restart the history is gone: an old resourceVersion is 410.
    drop(store);
    let store = Store::open(&path, &["configmaps", "secrets"]).unwrap();
    assert_eq!(
        store
            .watch("configmaps", Some(2))
            .unwrap_err()
            .code
            .as_u16(),
        410
    );
    assert!(store.watch("configmaps", Some(4)).unwrap().0.is_empty());
}
