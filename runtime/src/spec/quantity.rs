//! Kubernetes resource quantities (`128Mi`, `1G`, `500m`, `1.5`, `2e3`), as the API server
//! accepts them.

/// Parses `q` and returns its value times `scale` (1 for bytes, 1000 for millicores), rounded up.
pub(crate) fn parse(q: &str, scale: f64) -> Result<u64, String> {
    let bad = || format!("invalid quantity {q:?}");
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    if number.is_empty() || number.starts_with('-') {
        return Err(bad());
    }
    let value: f64 = number.parse().map_err(|_| bad())?;
    let multiplier = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse::<i32>().map_err(|_| bad())?),
        _ => return Err(bad()),
    };
    let scaled = (value * multiplier * scale).ceil();
    if !scaled.is_finite() || scaled > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(scaled as u64)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn quantities() {
        assert_eq!(parse("128Mi", 1.0), Ok(128 << 20));
        assert_eq!(parse("1.5Gi", 1.0), Ok(3 << 29));
        assert_eq!(parse("1G", 1.0), Ok(1_000_000_000));
        assert_eq!(parse("64", 1.0), Ok(64));
        assert_eq!(parse("2e3", 1.0), Ok(2000));
        assert_eq!(parse("500m", 1000.0), Ok(500));
        assert_eq!(parse("0.1", 1000.0), Ok(100));
        assert_eq!(parse("2", 1000.0), Ok(2000));
        for bad in ["", "Mi", "12XB", "-1", "1..2", "1e", "Gi1"] {
            assert!(parse(bad, 1.0).is_err(), "{bad:?}");
        }
    }
}
