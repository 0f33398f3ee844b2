//! A tree reader with the lexical rules of the MSCCL runtimes' hand-written XML reader
//! (msccl-ir.md §1.1): only space/LF/CR between elements, attributes separated by single
//! spaces on one line, values ending at a double quote, comments skipped, at most 16
//! attributes. Error texts follow the runtime's where it has one.

use super::XmlError;

/// Most attributes the runtime stores per element.
pub const MAX_ATTRS: usize = 16;
/// Names and values must stay below this length.
pub const MAX_STR_LEN: usize = 255;
/// Deepest element nesting read (MSCCL XML needs 4: algo, gpu, tb, step); deeper input is
/// rejected instead of recursing without bound.
pub const MAX_DEPTH: usize = 16;

/// One element with its attributes (in order) and children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// Element name.
    pub name: String,
    /// 1-based line of the `<`.
    pub line: usize,
    /// Attributes as written.
    pub attrs: Vec<(String, String)>,
    /// Child elements.
    pub children: Vec<Element>,
}

impl Element {
    /// The value of an attribute, if present.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Shows a character the way the error messages print it.
pub fn show_char(c: char) -> String {
    match c {
        '\t' => "\\t".into(),
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        c => c.to_string(),
    }
}

enum Node {
    Open(Element),
    SelfClosed(Element),
    Close(String, usize),
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
}

impl<'a> Lexer<'a> {
    fn err(&self, element: &str, message: impl Into<String>) -> XmlError {
        XmlError::new(self.line, element, None, message)
    }

    fn next_char(&mut self, element: &str) -> Result<char, XmlError> {
        let c = self
            .chars
            .next()
            .ok_or_else(|| self.err(element, "XML Parse : Unexpected EOF"))?;
        if c == '\n' {
            self.line += 1;
        }
        Ok(c)
    }

    /// Skips whitespace; returns the next char, or None at end of input.
    fn skip_space(&mut self) -> Option<char> {
        loop {
            let c = self.chars.next()?;
            match c {
                '\n' => self.line += 1,
                ' ' | '\r' => {}
                c => return Some(c),
            }
        }
    }

    /// Reads a token up to a terminator; `Ok((token, Some(value), last))` when it met `=`.
    fn token(
        &mut self,
        element: &str,
        allow_value: bool,
    ) -> Result<(String, Option<String>, char), XmlError> {
        let mut tok = String::new();
        loop {
            let c = self.next_char(element)?;
            if c == '=' {
                if !allow_value {
                    return Err(self.err(
                        element,
                        format!("XML Parse : Unexpected value with name {tok}"),
                    ));
                }
                let (value, last) = self.value(element, &tok)?;
                return Ok((tok, Some(value), last));
            }
            if matches!(c, ' ' | '>' | '/' | '\n' | '\r') {
                return Ok((tok, None, c));
            }
            tok.push(c);
            if tok.len() >= MAX_STR_LEN {
                return Err(self.err(
                    element,
                    format!("Error : name {tok} too long (max {MAX_STR_LEN})"),
                ));
            }
        }
    }

    /// Reads a quoted value (after `=`) and the char that follows it.
    fn value(&mut self, element: &str, key: &str) -> Result<(String, char), XmlError> {
        let q = self.next_char(element)?;
        if q != '"' && q != '\'' {
            return Err(XmlError::new(
                self.line,
                element,
                Some(key),
                "XML Parse : Expected (double) quote.",
            ));
        }
        let mut v = String::new();
        loop {
            let c = self.next_char(element)?;
            if c == '"' {
                break;
            }
            v.push(c);
            if v.len() >= MAX_STR_LEN {
                return Err(XmlError::new(
                    self.line,
                    element,
                    Some(key),
                    "value too long (the runtime copies values into a 256-byte buffer)",
                ));
            }
        }
        Ok((v, self.next_char(element)?))
    }

    fn skip_comment(&mut self) -> Result<(), XmlError> {
        let mut tail = [' '; 3];
        loop {
            let c = self
                .chars
                .next()
                .ok_or_else(|| self.err("", "XML Parse : unterminated comment"))?;
            if c == '\n' {
                self.line += 1;
            }
            tail = [tail[1], tail[2], c];
            if tail == ['-', '-', '>'] {
                return Ok(());
            }
        }
    }

    /// Reads the next node (skipping comments); None at end of input.
    fn node(&mut self) -> Result<Option<Node>, XmlError> {
        let line = loop {
            let Some(c) = self.skip_space() else {
                return Ok(None);
            };
            if c != '<' {
                return Err(self.err(
                    "",
                    format!("XML Parse error : expecting '<', got '{}'", show_char(c)),
                ));
            }
            let opener: String = self.chars.clone().take(3).collect();
            if opener != "!--" {
                break self.line;
            }
            self.chars.nth(2);
            self.skip_comment()?;
        };
        let (name, _, last) = self.token("", false)?;
        if name.is_empty() && last == '/' {
            let (close, _, last) = self.token("", false)?;
            if last != '>' {
                return Err(self.err(
                    &close,
                    format!(
                        "XML Parse error : unexpected trailing {} in closing tag {close}",
                        show_char(last)
                    ),
                ));
            }
            return Ok(Some(Node::Close(close, line)));
        }
        self.open_tag(name, line, last).map(Some)
    }

    fn open_tag(&mut self, name: String, line: usize, mut last: char) -> Result<Node, XmlError> {
        let mut el = Element {
            name,
            line,
            attrs: Vec::new(),
            children: Vec::new(),
        };
        let mut slots = 0;
        while last == ' ' {
            let (key, value, l) = self.token(&el.name, true)?;
            last = l;
            if key.is_empty() && value.is_none() {
                slots += 1; // an empty entry, as the runtime stores for a doubled space
                continue;
            }
            let Some(value) = value else {
                return Err(XmlError::new(
                    self.line,
                    &el.name,
                    Some(&key),
                    "attribute has no value",
                ));
            };
            slots += 1;
            if el.attrs.iter().any(|(k, _)| *k == key) {
                return Err(XmlError::new(
                    self.line,
                    &el.name,
                    Some(&key),
                    "duplicate attribute (the runtime would read only the first)",
                ));
            }
            if slots > MAX_ATTRS {
                return Err(XmlError::new(self.line, &el.name, Some(&key), format!(
                    "more than {MAX_ATTRS} attributes: the runtime ignores this one and any after it"
                )));
            }
            el.attrs.push((key, value));
        }
        if last == '/' {
            let c = self.next_char(&el.name)?;
            if c != '>' {
                return Err(self.err(
                    &el.name,
                    format!("XML Parse : expected >, got '{}'", show_char(c)),
                ));
            }
            return Ok(Node::SelfClosed(el));
        }
        if last != '>' {
            return Err(self.err(
                &el.name,
                format!("XML Parse : expected >, got '{}'", show_char(last)),
            ));
        }
        Ok(Node::Open(el))
    }

    /// Reads the children of an open element, `depth` levels deep, up to its closing tag.
    fn children(&mut self, el: &mut Element, depth: usize) -> Result<(), XmlError> {
        if depth > MAX_DEPTH {
            return Err(self.err(
                &el.name,
                format!("elements nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        loop {
            match self.node()? {
                None => return Err(self.err(&el.name, "XML Parse : Unexpected EOF")),
                Some(Node::Close(name, line)) => {
                    if name != el.name {
                        return Err(XmlError::new(
                            line,
                            &el.name,
                            None,
                            format!("XML Mismatch : {} / {name}", el.name),
                        ));
                    }
                    return Ok(());
                }
                Some(Node::SelfClosed(child)) => el.children.push(child),
                Some(Node::Open(mut child)) => {
                    self.children(&mut child, depth + 1)?;
                    el.children.push(child);
                }
            }
        }
    }
}

/// Parses a document: comments, then exactly one top element (with its subtree), then only
/// comments or whitespace.
pub fn parse_document(text: &str) -> Result<Element, XmlError> {
    let mut lx = Lexer {
        chars: text.chars().peekable(),
        line: 1,
    };
    let top = match lx.node()? {
        None => return Err(lx.err("", "XML Parse : Unexpected EOF (no element)")),
        Some(Node::Close(name, line)) => {
            return Err(XmlError::new(
                line,
                &name,
                None,
                format!("XML Mismatch : (none) / {name}"),
            ))
        }
        Some(Node::SelfClosed(el)) => el,
        Some(Node::Open(mut el)) => {
            lx.children(&mut el, 1)?;
            el
        }
    };
    if let Some(node) = lx.node()? {
        let (name, line) = match node {
            Node::Open(e) | Node::SelfClosed(e) => (e.name, e.line),
            Node::Close(n, l) => (n, l),
        };
        return Err(XmlError::new(
            line,
            &name,
            None,
            format!(
                "content after the closing tag of {} (the runtime reads a single algo element)",
                top.name
            ),
        ));
    }
    Ok(top)
}
