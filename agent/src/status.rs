//! API errors as the API server gives them: a `meta.k8s.io/v1 Status` with its HTTP code, reason
//! and, for invalid objects, one cause per field.

use http::StatusCode;
use serde_json::{Value, json};
use wasmpod::FieldErrorKind;

/// One field's problem, as `details.causes[]` carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    /// Its `reason` is the kind's cause type (`FieldValueInvalid`, ...).
    pub(crate) kind: FieldErrorKind,
    pub(crate) field: String,
    pub(crate) message: String,
}

impl From<&wasmpod::FieldError> for Cause {
    fn from(e: &wasmpod::FieldError) -> Cause {
        Cause {
            kind: e.kind,
            field: e.path.clone(),
            message: e.message.clone(),
        }
    }
}

/// An API request's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) code: StatusCode,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    pub(crate) details: Option<(String, String)>,
    pub(crate) causes: Vec<Cause>,
}

impl ApiError {
    fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            causes: Vec::new(),
        }
    }

    fn about(mut self, resource: &str, name: &str) -> ApiError {
        self.details = Some((resource.to_owned(), name.to_owned()));
        self
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    pub(crate) fn too_many_requests(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests", message)
    }

    pub(crate) fn unauthorized() -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
    }

    pub(crate) fn not_found(resource: &str, name: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("{resource} \"{name}\" not found"),
        )
        .about(resource, name)
    }

    /// A path the server does not serve.
    pub(crate) fn no_route() -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub(crate) fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", message)
    }

    pub(crate) fn already_exists(resource: &str, name: &str) -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        )
        .about(resource, name)
    }

    pub(crate) fn conflict(resource: &str, name: &str, why: &str) -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        )
        .about(resource, name)
    }

    /// An invalid object with one invalid field: 422.
    pub(crate) fn field_invalid(kind: &str, name: &str, field: &str, message: String) -> ApiError {
        ApiError::invalid(
            kind,
            name,
            vec![Cause {
                kind: FieldErrorKind::Invalid,
                field: field.into(),
                message,
            }],
        )
    }

    /// An invalid object: 422 with one cause per field error.
    pub(crate) fn invalid(kind: &str, name: &str, causes: Vec<Cause>) -> ApiError {
        let list = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect::<Vec<_>>();
        let shown = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        let mut e = ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {shown}"),
        )
        .about(kind, name);
        e.causes = causes;
        e
    }

    pub(crate) fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::GONE, "Expired", message)
    }

    pub(crate) fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            message,
        )
    }

    pub(crate) fn unsupported_media(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            message,
        )
    }

    pub(crate) fn forbidden(resource: &str, name: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "Forbidden", message).about(resource, name)
    }

    pub(crate) fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", message)
    }

    /// The `Status` object.
    pub(crate) fn to_json(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        if self.details.is_some() || !self.causes.is_empty() {
            let mut details = json!({});
            if let Some((kind, name)) = &self.details {
                details["name"] = json!(name);
                details["kind"] = json!(kind);
            }
            if !self.causes.is_empty() {
                details["causes"] = self
                    .causes
                    .iter()
                    .map(|c| {
                        json!({
                            "reason": c.kind.cause_type(),
                            "message": c.message,
                            "field": c.field,
                        })
                    })
                    .collect();
            }
            status["details"] = details;
        }
        status
    }
}
