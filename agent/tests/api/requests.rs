//! What clients see of the API, request by request, without kubectl in between: objects created,
//! read, listed, selected and printed as tables; updates and patches with what they may not
//! change and their conflicts; watches that replay what they missed and follow changes; the
//! statuses of bad routes and bad objects.

use serde_json::{Value, json};

use crate::support::{Answer, CONFIG_MAPS, Node, config_map};

fn labelled(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": app}},
        "data": {"a": "1", "b": "2"},
    })
}

/// The names of a list's items, in the list's order.
fn names(list: &Answer) -> Vec<&str> {
    list.body["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {}", list.body))
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect()
}

fn resource_version(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_created_read_listed_and_selected() {
    let node = Node::start().await;
    let c = &node.client;
    let created = c.post(CONFIG_MAPS, &labelled("web", "web")).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let object = &created.body;
    assert_eq!(
        (&object["apiVersion"], &object["kind"]),
        (&json!("v1"), &json!("ConfigMap"))
    );
    assert_eq!(object["metadata"]["namespace"], "default");
    assert_eq!(object["metadata"]["uid"].as_str().unwrap().len(), 36);
    let created_at = object["metadata"]["creationTimestamp"].as_str().unwrap();
    assert!(
        created_at.parse::<jiff::Timestamp>().is_ok(),
        "{created_at}"
    );
    assert!(resource_version(object) > 0);
    assert_eq!(object["data"], json!({"a": "1", "b": "2"}));
    // Read back as it was created.
    assert_eq!(
        c.get(&format!("{CONFIG_MAPS}/web")).await.body,
        created.body
    );
    assert_eq!(c.post(CONFIG_MAPS, &labelled("db", "db")).await.code, 201);
    let again = c.post(CONFIG_MAPS, &labelled("db", "db")).await;
    assert_eq!(
        (again.code, &again.body["reason"]),
        (409, &json!("AlreadyExists"))
    );
    let generated = c
        .post(CONFIG_MAPS, &json!({"metadata": {"generateName": "gen-"}}))
        .await;
    assert_eq!(generated.code, 201, "{}", generated.body);
    let name = generated.body["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    // Lists, whole and selected by labels and fields.
    let all = c.get(CONFIG_MAPS).await;
    assert_eq!(all.body["kind"], "ConfigMapList");
    assert!(resource_version(&all.body) >= resource_version(&generated.body));
    // Beside the namespace's `kube-root-ca.crt`, which the agent publishes in every namespace.
    assert_eq!(names(&all), ["db", name, "kube-root-ca.crt", "web"]);
    let selected = async |query: &str| c.get(&format!("{CONFIG_MAPS}?{query}")).await;
    assert_eq!(names(&selected("labelSelector=app%3Dweb").await), ["web"]);
    assert_eq!(
        names(&selected("labelSelector=app%20in%20(web,db)").await),
        ["db", "web"]
    );
    assert_eq!(
        names(&selected("labelSelector=!app").await),
        [name, "kube-root-ca.crt"]
    );
    assert_eq!(
        names(&selected("labelSelector=app&fieldSelector=metadata.name!%3Dweb").await),
        ["db"]
    );
    let unsupported = selected("fieldSelector=data.a%3D1").await;
    assert_eq!(unsupported.code, 400, "{}", unsupported.body);

    // The table `kubectl get` prints: its columns, the cells, each row's metadata.
    let table = c
        .get_table(&format!("{CONFIG_MAPS}?labelSelector=app%3Dweb"))
        .await;
    assert_eq!(table.body["kind"], "Table", "{}", table.body);
    let columns: Vec<&str> = table.body["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Name", "Data", "Age"]);
    let row = &table.body["rows"][0];
    assert_eq!(
        row["cells"].as_array().unwrap()[0..2],
        [json!("web"), json!(2)]
    );
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["metadata"]["uid"], object["metadata"]["uid"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_and_patches_keep_what_clients_may_not_change() {
    let node = Node::start().await;
    let c = &node.client;
    let path = format!("{CONFIG_MAPS}/web");
    let created = c.post(CONFIG_MAPS, &labelled("web", "web")).await.body;
    let put = async |body: &Value| {
        let body = serde_json::to_vec(body).unwrap();
        c.send("PUT", &path, "application/json", &body).await
    };
    // A replacement at the current resourceVersion is taken; uid and creation time stay.
    let mut next = created.clone();
    next["data"] = json!({"a": "2"});
    next["metadata"]["uid"] = json!("someone-else");
    next["metadata"]["creationTimestamp"] = json!("2000-01-01T00:00:00Z");
    let replaced = put(&next).await;
    assert_eq!(replaced.code, 200, "{}", replaced.body);
    assert_eq!(replaced.body["data"], json!({"a": "2"}));
    for kept in ["uid", "creationTimestamp", "namespace"] {
        assert_eq!(
            replaced.body["metadata"][kept], created["metadata"][kept],
            "{kept}"
        );
    }
    assert!(resource_version(&replaced.body) > resource_version(&created));
    // The same body again names a resourceVersion that is no longer current.
    let stale = put(&next).await;
    assert_eq!(
        (stale.code, &stale.body["reason"]),
        (409, &json!("Conflict"))
    );
    let mut renamed = replaced.body.clone();
    renamed["metadata"]["name"] = json!("other");
    assert_eq!(put(&renamed).await.code, 400);

    let merge = c
        .patch(
            &path,
            "application/merge-patch+json",
            &json!({"data": {"a": null, "b": "3"}}),
        )
        .await;
    assert_eq!(merge.body["data"], json!({"b": "3"}), "{}", merge.body);
    let add = json!([{"op": "add", "path": "/data/c", "value": "4"}]);
    let json_patch = c.patch(&path, "application/json-patch+json", &add).await;
    assert_eq!(json_patch.body["data"], json!({"b": "3", "c": "4"}));
    let failing = json!([{"op": "test", "path": "/data/c", "value": "x"}]);
    let failed = c
        .patch(&path, "application/json-patch+json", &failing)
        .await;
    assert_eq!(failed.code, 422, "{}", failed.body);
    let labels = json!({"metadata": {"labels": {"tier": "front"}}});
    let strategic = c
        .patch(&path, "application/strategic-merge-patch+json", &labels)
        .await;
    assert_eq!(
        strategic.body["metadata"]["labels"],
        json!({"app": "web", "tier": "front"})
    );
    let unknown = c.patch(&path, "text/plain", &labels).await;
    assert_eq!(unknown.code, 415, "{}", unknown.body);

    let deleted = c.send("DELETE", &path, "application/json", b"").await;
    assert_eq!(deleted.code, 200);
    assert_eq!(deleted.body["kind"], "Status");
    assert_eq!(deleted.body["details"]["uid"], created["metadata"]["uid"]);
    let gone = c.get(&path).await;
    assert_eq!((gone.code, &gone.body["reason"]), (404, &json!("NotFound")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_replay_what_they_missed_and_follow_changes() {
    let mut node = Node::start().await;
    let c = node.client.clone();
    let a = c.post(CONFIG_MAPS, &config_map("a")).await.body;
    let from = resource_version(&a);
    c.post(CONFIG_MAPS, &labelled("b", "web")).await;
    // From a's resourceVersion: b's creation, which the watch missed, then what comes.
    let mut watch = c
        .watch(&format!("{CONFIG_MAPS}?watch=1&resourceVersion={from}"))
        .await;
    let added = watch.next().await;
    assert_eq!(added["type"], "ADDED");
    assert_eq!(added["object"]["metadata"]["name"], "b");
    let patch = json!({"data": {"a": "2"}});
    c.patch(
        &format!("{CONFIG_MAPS}/a"),
        "application/merge-patch+json",
        &patch,
    )
    .await;
    let modified = watch.next().await;
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"]["data"]["a"], "2");
    c.send(
        "DELETE",
        &format!("{CONFIG_MAPS}/b"),
        "application/json",
        b"",
    )
    .await;
    let deleted = watch.next().await;
    assert_eq!(deleted["type"], "DELETED");
    assert_eq!(deleted["object"]["metadata"]["name"], "b");
    assert!(resource_version(&deleted["object"]) > resource_version(&modified["object"]));

    // A label-selected watch from now: only the objects it selects.
    let mut selected = c
        .watch(&format!("{CONFIG_MAPS}?watch=1&labelSelector=app%3Dweb"))
        .await;
    c.post(CONFIG_MAPS, &config_map("unselected")).await;
    c.post(CONFIG_MAPS, &labelled("selected", "web")).await;
    let first = selected.next().await;
    assert_eq!(
        (&first["type"], &first["object"]["metadata"]["name"]),
        (&json!("ADDED"), &json!("selected"))
    );

    // After a restart the history is gone: an older resourceVersion is 410 Gone, as the API
    // server answers a client that must list again.
    node.restart().await;
    let old = format!("{CONFIG_MAPS}?watch=1&resourceVersion={from}");
    let gone = node.client.get(&old).await;
    assert_eq!(
        (gone.code, &gone.body["reason"]),
        (410, &json!("Expired")),
        "{}",
        gone.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_routes_and_bad_objects_get_the_api_servers_statuses() {
    let node = Node::start().await;
    let c = &node.client;
    for path in [
        "/api/v1/nothings",
        "/apis/unknown.example/v1/things",
        "/nowhere",
    ] {
        let answer = c.get(path).await;
        assert_eq!(answer.code, 404, "{path}: {}", answer.body);
        assert_eq!(answer.body["kind"], "Status", "{path}");
    }
    let event = json!({"metadata": {"name": "e"}});
    let answer = c.post("/api/v1/namespaces/default/events", &event).await;
    assert_eq!(answer.code, 405, "{}", answer.body);
    let answer = c
        .send(
            "DELETE",
            "/api/v1/namespaces/default",
            "application/json",
            b"",
        )
        .await;
    assert_eq!(answer.code, 405, "{}", answer.body);
    let missing = c.get(&format!("{CONFIG_MAPS}/missing")).await;
    assert_eq!(missing.body["details"]["name"], "missing");

    // Bad objects: the field is named, and an invalid one's cause says what is wrong with it.
    let cases = [
        (
            json!({"metadata": {"name": "Bad_Name"}}),
            422,
            "metadata.name",
            "FieldValueInvalid",
        ),
        (
            json!({"metadata": {"name": "k"}, "data": {"a/b": "x"}}),
            422,
            "data[a/b]",
            "FieldValueInvalid",
        ),
        (
            json!({"metadata": {}}),
            422,
            "metadata.name",
            "FieldValueRequired",
        ),
        (
            json!({"metadata": {"name": "l", "labels": {"a": 5}}}),
            400,
            "metadata.labels.a",
            "",
        ),
        (
            json!({"metadata": {"name": "m"}, "kind": 7}),
            400,
            "kind",
            "",
        ),
        (
            json!({"kind": "Secret", "metadata": {"name": "n"}}),
            400,
            "API version",
            "",
        ),
    ];
    for (body, code, field, cause) in cases {
        let answer = c.post(CONFIG_MAPS, &body).await;
        assert_eq!(answer.code, code, "{body}: {}", answer.body);
        assert_eq!(answer.body["kind"], "Status");
        let said = answer.body.to_string();
        assert!(said.contains(field), "{body}: {said}");
        if code == 422 {
            let first = &answer.body["details"]["causes"][0];
            assert_eq!(
                (&first["reason"], &first["field"]),
                (&json!(cause), &json!(field)),
                "{body}"
            );
        }
    }
}

/// A watch of nodes sees the node, then each change of its labels (`kubectl label node`) as
/// `MODIFIED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_of_nodes_follows_their_labels() {
    let node = Node::start().await;
    let c = node.client.clone();
    let mut watch = c.watch("/api/v1/nodes?watch=1").await;
    let added = watch.next().await;
    assert_eq!(added["type"], "ADDED");
    let name = added["object"]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let patch = json!({"metadata": {"labels": {"tier": "edge"}}});
    let answer = c
        .patch(
            &format!("/api/v1/nodes/{name}"),
            "application/strategic-merge-patch+json",
            &patch,
        )
        .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    let modified = watch.next().await;
    assert_eq!(modified["type"], "MODIFIED");
    assert_eq!(modified["object"]["metadata"]["labels"]["tier"], "edge");
}
