//! How a pod's HTTP handler containers serve: the `wasmpod.dev/http-*` annotations.
//!
//! ```yaml
//! metadata:
//!   annotations:
//!     wasmpod.dev/http-max-concurrency: "32"   # requests handled at once, per container
//!     wasmpod.dev/http-request-timeout: 5s     # a request running longer is cut
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use super::FieldError;

/// The annotation that bounds the requests one handler container runs at once.
pub(crate) const MAX_CONCURRENCY: &str = "wasmpod.dev/http-max-concurrency";
/// The annotation that bounds how long one request may run.
pub(crate) const REQUEST_TIMEOUT: &str = "wasmpod.dev/http-request-timeout";

/// Requests beyond this many at once wait for a slot (each holds a guest instance).
const DEFAULT_CONCURRENCY: usize = 128;
const CONCURRENCY_LIMIT: usize = 10_000;
/// A request is cut after this long unless the pod says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const TIMEOUT_LIMIT: Duration = Duration::from_secs(3600);

/// How an HTTP handler container of the pod serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Serving {
    /// Requests handled at once by one container; more wait.
    pub concurrency: usize,
    /// The longest one request runs, from its arrival to its response's end.
    pub timeout: Duration,
}

impl Default for Serving {
    fn default() -> Self {
        Serving {
            concurrency: DEFAULT_CONCURRENCY,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// The pod's serving options from its annotations, each checked.
pub(crate) fn check(
    annotations: &BTreeMap<String, String>,
    errors: &mut Vec<FieldError>,
) -> Serving {
    let mut serving = Serving::default();
    let at = |key: &str| format!("metadata.annotations[{key}]");
    if let Some(value) = annotations.get(MAX_CONCURRENCY) {
        match value.trim().parse::<usize>() {
            Ok(n) if (1..=CONCURRENCY_LIMIT).contains(&n) => serving.concurrency = n,
            _ => errors.push(FieldError::invalid(
                at(MAX_CONCURRENCY),
                format!(
                    "invalid value {value:?}: must be a whole number from 1 to {CONCURRENCY_LIMIT}"
                ),
            )),
        }
    }
    if let Some(value) = annotations.get(REQUEST_TIMEOUT) {
        match value.trim().parse::<jiff::SignedDuration>() {
            Ok(d) if d.is_positive() && d.unsigned_abs() <= TIMEOUT_LIMIT => {
                serving.timeout = d.unsigned_abs();
            }
            _ => errors.push(FieldError::invalid(
                at(REQUEST_TIMEOUT),
                format!(
                    "invalid value {value:?}: must be a duration such as 500ms, 30s or 2m, above \
                     0 and at most 1h"
                ),
            )),
        }
    }
    serving
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_one(key: &str, value: &str) -> (Serving, Vec<FieldError>) {
        let mut errors = Vec::new();
        let annotations = BTreeMap::from([(key.to_owned(), value.to_owned())]);
        (check(&annotations, &mut errors), errors)
    }

    #[test]
    fn durations_and_counts_parse_within_their_bounds() {
        assert_eq!(
            check_one(REQUEST_TIMEOUT, "500ms").0.timeout,
            Duration::from_millis(500)
        );
        assert_eq!(
            check_one(REQUEST_TIMEOUT, "2m").0.timeout,
            Duration::from_secs(120)
        );
        assert_eq!(check_one(MAX_CONCURRENCY, "8").0.concurrency, 8);
        assert_eq!(check(&BTreeMap::new(), &mut Vec::new()), Serving::default());
        for bad in ["0s", "-1s", "2h", "soon", ""] {
            let (_, errors) = check_one(REQUEST_TIMEOUT, bad);
            assert_eq!(errors.len(), 1, "{bad:?}");
            assert_eq!(
                errors[0].path,
                "metadata.annotations[wasmpod.dev/http-request-timeout]"
            );
        }
        for bad in ["0", "10001", "-3", "many"] {
            assert_eq!(check_one(MAX_CONCURRENCY, bad).1.len(), 1, "{bad:?}");
        }
    }
}
