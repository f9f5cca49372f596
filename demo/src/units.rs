//! How the demo prints its figures.

/// Bytes in KiB, or MiB from 1 MiB on, signed.
pub fn bytes(b: i64) -> String {
    let a = b.unsigned_abs() as f64;
    let sign = if b < 0 { "-" } else { "" };
    if a >= (1 << 20) as f64 {
        format!("{sign}{:.1} MiB", a / (1 << 20) as f64)
    } else {
        format!("{sign}{:.0} KiB", a / 1024.0)
    }
}
