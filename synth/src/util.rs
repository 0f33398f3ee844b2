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
    let message = err.to_string().replace('\n', "\\n").replace('\r', "\\r");
    anyhow::anyhow!("{path}:{}: {message}", err.line())
}
