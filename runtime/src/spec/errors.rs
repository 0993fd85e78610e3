//! Validation errors: one per problem, each at a field path, collected for a whole document.

use std::fmt;
use std::path::PathBuf;

/// What kind of problem a [`FieldError`] is: the Kubernetes API server's field error types, and
/// one of wasmpod's own for a field it does not honour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FieldErrorKind {
    /// A value that must be given is missing.
    Required,
    /// A value is malformed or out of range.
    Invalid,
    /// A value is not one of those allowed (an enumeration).
    Unsupported,
    /// A value repeats one that must be unique.
    Duplicate,
    /// Something the field names does not exist (a volume, a ConfigMap key, a file).
    NotFound,
    /// The field is valid Kubernetes, but wasmpod does not honour it (and never ignores it).
    NotSupportedByWasmpod,
    /// The field is not part of the Kubernetes type.
    Unknown,
    /// The input or what it expands to is larger than wasmpod reads.
    TooLarge,
    /// The field may not be set or changed here (a pod update changing more than its images).
    Forbidden,
}

impl FieldErrorKind {
    /// The `type` of a Kubernetes `StatusCause` for this kind (`FieldValueRequired`, ...).
    pub fn cause_type(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::Unsupported => "FieldValueNotSupported",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::NotFound => "FieldValueNotFound",
            FieldErrorKind::NotSupportedByWasmpod => "FieldValueForbidden",
            FieldErrorKind::Unknown => "FieldValueUnknown",
            FieldErrorKind::TooLarge => "FieldValueTooLong",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
        }
    }
}

/// One problem in a Pod document, at a field path such as `spec.containers[1].image`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The path of the offending field, in the notation `kubectl` uses.
    pub path: String,
    /// What kind of problem it is.
    pub kind: FieldErrorKind,
    /// What is wrong with it.
    pub message: String,
}

macro_rules! constructors {
    ($($name:ident => $kind:ident),* $(,)?) => {
        impl FieldError {
            $(
                #[doc = concat!("A [`FieldErrorKind::", stringify!($kind), "`] error.")]
                pub(crate) fn $name(path: impl Into<String>, message: impl Into<String>) -> Self {
                    FieldError {
                        path: path.into(),
                        kind: FieldErrorKind::$kind,
                        message: message.into(),
                    }
                }
            )*
        }
    };
}

constructors! {
    required => Required,
    invalid => Invalid,
    unsupported => Unsupported,
    duplicate => Duplicate,
    not_found => NotFound,
    not_supported => NotSupportedByWasmpod,
    unknown => Unknown,
    too_large => TooLarge,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// A field's path in a document, built a step at a time: `spec.containers[0].image`, in the
/// notation `kubectl` uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FieldPath(String);

impl FieldPath {
    /// The path of a top-level field.
    pub(crate) fn new(name: &str) -> FieldPath {
        FieldPath(name.to_owned())
    }

    /// A field of this one: `.name`.
    pub(crate) fn child(&self, name: &str) -> FieldPath {
        if self.0.is_empty() {
            FieldPath::new(name)
        } else {
            FieldPath(format!("{}.{name}", self.0))
        }
    }

    /// An item of this list: `[i]`.
    pub(crate) fn index(&self, i: usize) -> FieldPath {
        FieldPath(format!("{}[{i}]", self.0))
    }

    /// An entry of this map, or a list item named by its key: `[KEY]`.
    pub(crate) fn key(&self, key: &str) -> FieldPath {
        FieldPath(format!("{}[{key}]", self.0))
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<FieldPath> for String {
    fn from(path: FieldPath) -> String {
        path.0
    }
}

impl From<&FieldPath> for String {
    fn from(path: &FieldPath) -> String {
        path.0.clone()
    }
}

/// Every problem found in one Pod document, reported together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidPod {
    /// The file the document came from, when it came from one.
    pub file: Option<PathBuf>,
    /// The problems, in document order.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for InvalidPod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self
            .file
            .as_deref()
            .map_or_else(|| "pod".into(), |p| p.display().to_string());
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{file}: {error}")?;
        }
        Ok(())
    }
}
