//! Times as the API writes them.

/// Now, as the API server writes a timestamp (RFC 3339, whole seconds, UTC).
pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
