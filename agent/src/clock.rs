//! Times as the API writes them.

/// Now, as the API server writes a timestamp (RFC 3339, whole seconds, UTC).
pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Now, as an object's metadata holds it (whole seconds).
pub(crate) fn time() -> wasmpod::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    let now = jiff::Timestamp::now();
    wasmpod::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::from_second(now.as_second()).unwrap_or(now),
    )
}
