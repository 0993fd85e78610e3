//! A container's registry image: pulled when the container is to start (as the kubelet's
//! `EnsureImageExists`), in a task of its own so that the pod's supervisor goes on (a deletion
//! during a pull is handled at once); with the kubelet's events and waiting reasons
//! (`Pulling`, `Pulled`, `Failed` with `ErrImagePull`, `ErrImageNeverPull` or
//! `SignatureValidationFailed`, then `ImagePullBackOff` under the image backoff).

use std::sync::Arc;

use tokio::time::Instant;

use super::container::{PullFailure, PullTask, State, Waiting};
use super::start::fmt_duration;
use super::{Msg, PodTask};
use crate::events::{EventType, Reason};
use crate::images::{PullError, PullPolicy, Resolved};

impl super::container::Container {
    /// Whether the container's last pull failed and it waits out the image backoff (a pull
    /// refused by the `Never` policy is not tried again).
    pub(super) fn pull_failed(&self) -> bool {
        matches!(
            self.state,
            State::Waiting {
                reason: Waiting::PullFailed(
                    PullFailure::ErrImagePull | PullFailure::SignatureValidationFailed
                ),
                ..
            }
        )
    }
}

impl PodTask {
    /// Whether container `index` has the registry image it needs for this start; if not, its
    /// pull is begun (or under way) and the start waits for [`Msg::Pulled`].
    pub(super) fn image_ready(&mut self, index: usize) -> bool {
        let c = &mut self.containers[index];
        let Some(pull) = &c.spec.pull else {
            return true;
        };
        // `Always` pulls again for every start of the container, as the kubelet does.
        match c.pulled.as_deref() {
            Some((_, runs)) if pull.policy != PullPolicy::Always || *runs == c.runs => {
                return true;
            }
            _ => {}
        }
        if c.pulling.is_some() {
            return false;
        }
        let pull = pull.clone();
        c.pulled = None;
        c.wait(Waiting::ContainerCreating, None);
        let images = self.node.images.clone();
        if !self.spec.missing_pull_secrets.is_empty() {
            let message = format!(
                "Unable to retrieve some image pull secrets ({}); attempting to pull the image \
                 may not succeed.",
                self.spec.missing_pull_secrets.join(", ")
            );
            self.container_event(
                index,
                EventType::Warning,
                Reason::FailedToRetrieveImagePullSecret,
                message,
                None,
            );
        }
        if pull.policy == PullPolicy::Always || !images.present(&pull.shown) {
            let message = format!("Pulling image {:?}", pull.shown);
            self.container_event(index, EventType::Normal, Reason::Pulling, message, None);
        }
        let (tx, secrets) = (self.tx.clone(), self.spec.pull_secrets.clone());
        let task = tokio::spawn(async move {
            let command = pull.command.as_ref().and_then(|c| c.first());
            let result = images
                .ensure(
                    &pull.reference,
                    pull.policy,
                    &secrets,
                    command.map(String::as_str),
                )
                .await;
            tx.send(Msg::Pulled { index, result });
        });
        self.containers[index].pulling = Some(PullTask(task.abort_handle()));
        false
    }

    /// The pull of container `index`'s image ended.
    pub(super) fn pulled(&mut self, index: usize, result: Result<Resolved, PullError>) {
        let now = Instant::now();
        let options = self.node.backoff;
        let c = &mut self.containers[index];
        c.pulling = None;
        let Some(pull) = c.spec.pull.clone() else {
            return;
        };
        let shown = &pull.shown;
        let (reason, message) = match result {
            Ok(resolved) => {
                let message = match resolved.pulled {
                    None => format!("Container image {shown:?} already present on machine"),
                    Some((took, size)) => format!(
                        "Successfully pulled image {shown:?} in {} ({} including waiting). \
                         Image size: {size} bytes.",
                        fmt_duration(took),
                        fmt_duration(took)
                    ),
                };
                let spec = Arc::make_mut(&mut c.spec);
                spec.image = resolved.wasm.clone();
                // An ordinary image's entry point and arguments, as Kubernetes joins them.
                if resolved.entrypoint.is_some() || resolved.cmd.is_some() {
                    spec.argv = match (&pull.command, &pull.args) {
                        (Some(command), args) => command
                            .iter()
                            .chain(args.iter().flatten())
                            .cloned()
                            .collect(),
                        (None, Some(args)) => resolved
                            .entrypoint
                            .iter()
                            .flatten()
                            .chain(args)
                            .cloned()
                            .collect(),
                        (None, None) => resolved
                            .entrypoint
                            .iter()
                            .flatten()
                            .chain(resolved.cmd.iter().flatten())
                            .cloned()
                            .collect(),
                    };
                }
                c.load_failed_at = None;
                c.retry_at = None;
                c.pulled = Some(Box::new((resolved, c.runs)));
                self.container_event(index, EventType::Normal, Reason::Pulled, message, None);
                return;
            }
            Err(PullError::NeverPull) => (
                PullFailure::ErrImageNeverPull,
                format!("Container image {shown:?} is not present with pull policy of Never"),
            ),
            Err(PullError::Failed(why) | PullError::Refused(why)) => (
                PullFailure::ErrImagePull,
                format!("Failed to pull image {shown:?}: {why}"),
            ),
            // The container runtime's error for an image the node's policy refuses unsigned
            // (CRI's `ErrSignatureValidationFailed`), backed off as a failed pull.
            Err(PullError::Unsigned(why)) => (
                PullFailure::SignatureValidationFailed,
                format!("Failed to pull image {shown:?}: signature: {why}"),
            ),
        };
        // The kubelet's image backoff: the next pull waits, doubling.
        c.image_failed(now, &options);
        let reason = Waiting::PullFailed(reason);
        c.wait(reason, Some(message.clone()));
        self.container_event(index, EventType::Warning, Reason::Failed, message, None);
        let error = format!("Error: {}", reason.reason());
        self.container_event(index, EventType::Warning, Reason::Failed, error, None);
    }

    /// A container waiting out the image backoff after `ErrImagePull` (or
    /// `SignatureValidationFailed`) shows `ImagePullBackOff`.
    pub(super) fn image_backoff(&mut self, index: usize) {
        let c = &mut self.containers[index];
        if !c.pull_failed() {
            return;
        }
        let Some(pull) = &c.spec.pull else {
            return;
        };
        let message = format!("Back-off pulling image {:?}", pull.shown);
        c.wait(Waiting::ImagePullBackOff, Some(message.clone()));
        self.container_event(index, EventType::Normal, Reason::BackOff, message, None);
        let error = "Error: ImagePullBackOff".to_owned();
        self.container_event(index, EventType::Warning, Reason::Failed, error, None);
    }
}
