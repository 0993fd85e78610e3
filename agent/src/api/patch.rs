//! Strategic merge patches (what `kubectl apply` sends), for the fields of Pods and the objects
//! beside them: a JSON merge patch, except that lists of named things merge by their key
//! (`containers` by `name`, `ports` by `containerPort`, ...) and `$patch` / `$setElementOrder`
//! directives are honoured or dropped as the API server does.

use serde_json::{Map, Value};

/// The merge key of a list field, by the field's name (Kubernetes' `patchMergeKey`).
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "readinessGates"
        | "schedulingGates" => {
            if field == "readinessGates" {
                "conditionType"
            } else {
                "name"
            }
        }
        "ports" => "containerPort",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Applies `patch` to `target`.
pub(crate) fn strategic(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replaced = patch.clone();
        replaced.remove("$patch");
        *target = Value::Object(replaced);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(map) = target else { return };
    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            map.remove(key);
            continue;
        }
        match (map.get_mut(key), value, merge_key(key)) {
            (Some(Value::Array(items)), Value::Array(patches), Some(k)) => {
                merge_list(items, patches, k);
            }
            (Some(existing @ Value::Object(_)), Value::Object(_), _) => strategic(existing, value),
            _ => {
                let mut v = value.clone();
                strip_directives(&mut v);
                map.insert(key.clone(), v);
            }
        }
    }
}

fn merge_list(items: &mut Vec<Value>, patches: &[Value], key: &str) {
    for p in patches {
        let id = p.get(key);
        let directive = p.get("$patch").and_then(Value::as_str);
        let at = id.and_then(|id| items.iter().position(|i| i.get(key) == Some(id)));
        match (directive, at) {
            (Some("delete"), Some(i)) => {
                items.remove(i);
            }
            (Some("delete"), None) => {}
            (_, Some(i)) => strategic(&mut items[i], p),
            (_, None) => {
                let mut v = p.clone();
                strip_directives(&mut v);
                items.push(v);
            }
        }
    }
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kubectl_apply_patches_merge_containers_by_name() {
        let mut pod = json!({
            "metadata": {"labels": {"app": "hello"}, "annotations": {"a": "1"}},
            "spec": {"containers": [
                {"name": "main", "image": "hello:1.0", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "side:1.0"}]}
        });
        // What `kubectl apply` sent in the recorded session.
        let patch = json!({
            "metadata": {"annotations": {"a": null, "b": "2"}, "labels": {"tier": "web"}},
            "spec": {"$setElementOrder/containers": [{"name": "main"}, {"name": "side"}],
                "containers": [{"image": "hello:2.0", "name": "main"}]}
        });
        strategic(&mut pod, &patch);
        assert_eq!(
            pod,
            json!({
                "metadata": {"labels": {"app": "hello", "tier": "web"}, "annotations": {"b": "2"}},
                "spec": {"containers": [
                    {"name": "main", "image": "hello:2.0", "env": [{"name": "A", "value": "1"}]},
                    {"name": "side", "image": "side:1.0"}]}
            })
        );
        let delete = json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}});
        strategic(&mut pod, &delete);
        assert_eq!(pod["spec"]["containers"].as_array().unwrap().len(), 1);
        let replace = json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}});
        strategic(&mut pod, &replace);
        assert_eq!(pod["metadata"]["labels"], json!({"only": "this"}));
    }
}
