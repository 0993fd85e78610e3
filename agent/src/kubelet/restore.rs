//! Bringing the store's pods back after the agent restarts, as the kubelet does after a node
//! restart.

use super::*;

impl Kubelet {
    /// Brings the stored pods back after the agent started again, as the kubelet does after a
    /// node restart: finished pods stay as they ended; a `Never` pod that had started ends
    /// Failed (its containers were lost); every other pod runs again, its containers' restart
    /// counts going on (the lost instances count as exited, `ContainerStatusUnknown`); a pod
    /// that was being deleted starts its termination again with its full grace period.
    pub(crate) fn restore(self: &Arc<Self>) {
        let (_, pods) = self.store.list("pods", None);
        for pod in pods {
            let (ns, name, uid) = (
                pod.namespace().to_owned(),
                pod.name().to_owned(),
                pod.uid().to_owned(),
            );
            let Pod { spec, status, .. } = pod.pod();
            let status = status.unwrap_or_default();
            if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
                continue;
            }
            let started = status
                .init_container_statuses
                .iter()
                .chain(&status.container_statuses)
                .flatten()
                .any(|c| {
                    c.state
                        .as_ref()
                        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
                        || c.last_state
                            .as_ref()
                            .is_some_and(|s| s.terminated.is_some())
                });
            let deleting = pod.metadata.deletion_grace_period_seconds;
            let never = spec.and_then(|s| s.restart_policy).as_deref() == Some("Never");
            if never && started {
                if deleting.is_some() {
                    // Nothing is left to stop: the object goes.
                    let _ = self
                        .store
                        .delete_if("pods", &ns, &name, Durable::Now, |_| true);
                    self.forget(&ns, &name, &uid);
                } else {
                    self.set_status(&ns, &name, &uid, |s| {
                        end_lost(
                            s,
                            "NodeAgentRestarted",
                            "The node agent restarted while the pod ran; its containers were lost and restartPolicy is Never",
                        )
                    });
                }
                continue;
            }
            if let Some(grace) = deleting {
                // The termination starts again, with the whole grace period.
                let at = crate::clock::time()
                    .0
                    .checked_add(jiff::SignedDuration::from_secs(grace))
                    .unwrap_or(jiff::Timestamp::MAX);
                let _ = self.store.update("pods", &ns, &name, Durable::Now, |p| {
                    p.metadata.deletion_timestamp = Some(Time(at));
                    Ok(())
                });
            }
            let pod = self.store.get("pods", &ns, &name).unwrap_or(pod);
            self.restoring.send_modify(|n| *n += 1);
            self.resume(pod, status);
        }
    }
}

/// A pod's status when it ended without its containers' ends being seen (lost with the agent's
/// process, or the pod could not be made again): Failed, with `reason` and `message`, and every
/// container that ran terminated as `ContainerStatusUnknown`.
pub(super) fn end_lost(status: &mut PodStatus, reason: &str, message: &str) {
    use wasmpod::k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated};
    status.phase = Some("Failed".into());
    status.reason = Some(reason.into());
    status.message = Some(message.into());
    let containers = status
        .init_container_statuses
        .iter_mut()
        .chain(status.container_statuses.iter_mut())
        .flatten();
    for c in containers {
        let Some(running) = c.state.as_ref().and_then(|s| s.running.clone()) else {
            continue;
        };
        c.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                reason: Some("ContainerStatusUnknown".into()),
                message: Some(
                    "The container could not be located when the node agent restarted".into(),
                ),
                started_at: running.started_at,
                finished_at: Some(crate::clock::time()),
                ..Default::default()
            }),
            ..Default::default()
        });
        c.ready = false;
    }
    for c in status.conditions.iter_mut().flatten() {
        if matches!(c.type_.as_str(), "Ready" | "ContainersReady") {
            c.status = "False".into();
            c.reason = Some("PodFailed".into());
        }
    }
}
