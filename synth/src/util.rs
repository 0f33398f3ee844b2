//! Small helpers shared by the file readers: one-line error messages with file and line.

/// Turns a TOML parse error into one line: `FILE:LINE: MESSAGE` (the field is in the message).
pub fn toml_error(path: &str, text: &str, err: &toml::de::Error) -> anyhow::Error {
    let line = err
        .span()
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    let message = err.message().replace('\n', " ");
    match line {
        Some(line) => anyhow::anyhow!("{path}:{line}: {message}"),
        None => anyhow::anyhow!("{path}: {message}"),
    }
}

/// Turns a JSON parse error into one line: `FILE:LINE: MESSAGE` (a key quoted in the message
/// may hold line breaks).
pub fn json_error(path: &str, err: &serde_json::Error) -> anyhow::Error {
    let message = escape_line_breaks(&err.to_string());
    anyhow::anyhow!("{path}:{}: {message}", err.line())
}

/// `text` with its line breaks written as `\n` and `\r`, so that an error quoting a user's
/// value stays one line.
pub fn escape_line_breaks(text: &str) -> String {
    text.replace('\n', "\\n").replace('\r', "\\r")
}

/// This process's peak resident memory (MB) and CPU time (user + system, seconds) so far,
/// read from `/proc/self` (`None` where there is no such file, e.g. off Linux). Reported by
/// the main command's `--json` so that benchmarks can record what a run cost.
pub fn resources() -> Option<serde_json::Value> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let peak_kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let cpu = (ticks(11)? + ticks(12)?) / 100.0;
    Some(serde_json::json!({"peak_rss_mb": peak_kb / 1024.0, "cpu_seconds": cpu}))
}
