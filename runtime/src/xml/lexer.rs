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

/// One element with its attributes (in order) and children, borrowing its names and
/// values from the document text (a 1024-rank program's XML has tens of millions of
/// attributes: one allocation each would dominate reading it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element<'a> {
    /// Element name.
    pub name: &'a str,
    /// 1-based line of the `<`.
    pub line: usize,
    /// Attributes as written.
    pub attrs: Vec<(&'a str, &'a str)>,
    /// Child elements.
    pub children: Vec<Element<'a>>,
}

impl<'a> Element<'a> {
    /// The value of an attribute, if present.
    pub fn attr(&self, key: &str) -> Option<&'a str> {
        // Length and first byte first: a step's ten lookups would otherwise spend most of
        // their time in comparisons of names that differ.
        let (len, first) = (key.len(), key.as_bytes().first());
        self.attrs
            .iter()
            .find(|(k, _)| k.len() == len && k.as_bytes().first() == first && *k == key)
            .map(|(_, v)| *v)
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

enum Node<'a> {
    Open(Element<'a>),
    SelfClosed(Element<'a>),
    Close(&'a str, usize),
}

struct Lexer<'a> {
    text: &'a str,
    /// Byte offset of the next character.
    pos: usize,
    line: usize,
}

impl<'a> Lexer<'a> {
    fn err(&self, element: &str, message: impl Into<String>) -> XmlError {
        XmlError::new(self.line, element, None, message)
    }

    /// The next character, consumed; None at the end.
    fn bump(&mut self) -> Option<char> {
        let b = *self.text.as_bytes().get(self.pos)?;
        let c = if b < 0x80 {
            b as char
        } else {
            self.text[self.pos..]
                .chars()
                .next()
                .expect("not at the end")
        };
        self.pos += c.len_utf8();
        Some(c)
    }

    fn next_char(&mut self, element: &str) -> Result<char, XmlError> {
        let c = self
            .bump()
            .ok_or_else(|| self.err(element, "XML Parse : Unexpected EOF"))?;
        if c == '\n' {
            self.line += 1;
        }
        Ok(c)
    }

    /// Skips whitespace; returns the next char, or None at end of input.
    fn skip_space(&mut self) -> Option<char> {
        loop {
            let c = self.bump()?;
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
    ) -> Result<(&'a str, Option<&'a str>, char), XmlError> {
        let start = self.pos;
        // ASCII that ends nothing is taken in one sweep; the loop below sees the rest.
        let bytes = self.text.as_bytes();
        let limit = (start + MAX_STR_LEN - 1).min(bytes.len());
        while self.pos < limit
            && bytes[self.pos] < 0x80
            && !matches!(bytes[self.pos], b'=' | b' ' | b'>' | b'/' | b'\n' | b'\r')
        {
            self.pos += 1;
        }
        loop {
            let before = self.pos;
            let c = self.next_char(element)?;
            if c == '=' {
                let tok = &self.text[start..before];
                if !allow_value {
                    return Err(self.err(
                        element,
                        format!("XML Parse : Unexpected value with name {tok}"),
                    ));
                }
                let (value, last) = self.value(element, tok)?;
                return Ok((tok, Some(value), last));
            }
            if matches!(c, ' ' | '>' | '/' | '\n' | '\r') {
                return Ok((&self.text[start..before], None, c));
            }
            if self.pos - start >= MAX_STR_LEN {
                let tok = &self.text[start..self.pos];
                return Err(self.err(
                    element,
                    format!("Error : name {tok} too long (max {MAX_STR_LEN})"),
                ));
            }
        }
    }

    /// Reads a quoted value (after `=`) and the char that follows it.
    fn value(&mut self, element: &str, key: &str) -> Result<(&'a str, char), XmlError> {
        let q = self.next_char(element)?;
        if q != '"' && q != '\'' {
            return Err(XmlError::new(
                self.line,
                element,
                Some(key),
                "XML Parse : Expected (double) quote.",
            ));
        }
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let limit = (start + MAX_STR_LEN - 1).min(bytes.len());
        while self.pos < limit && bytes[self.pos] < 0x80 && bytes[self.pos] != b'"' {
            if bytes[self.pos] == b'\n' {
                self.line += 1;
            }
            self.pos += 1;
        }
        loop {
            let before = self.pos;
            let c = self.next_char(element)?;
            if c == '"' {
                let v = &self.text[start..before];
                return Ok((v, self.next_char(element)?));
            }
            if self.pos - start >= MAX_STR_LEN {
                return Err(XmlError::new(
                    self.line,
                    element,
                    Some(key),
                    "value too long (the runtime copies values into a 256-byte buffer)",
                ));
            }
        }
    }

    fn skip_comment(&mut self) -> Result<(), XmlError> {
        let rest = &self.text[self.pos..];
        let Some(end) = rest.find("-->") else {
            self.line += rest.matches('\n').count();
            self.pos = self.text.len();
            return Err(self.err("", "XML Parse : unterminated comment"));
        };
        self.line += rest[..end].matches('\n').count();
        self.pos += end + 3;
        Ok(())
    }

    /// Reads the next node (skipping comments); None at end of input.
    fn node(&mut self) -> Result<Option<Node<'a>>, XmlError> {
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
            if !self.text[self.pos..].starts_with("!--") {
                break self.line;
            }
            self.pos += 3;
            self.skip_comment()?;
        };
        let (name, _, last) = self.token("", false)?;
        if name.is_empty() && last == '/' {
            let (close, _, last) = self.token("", false)?;
            if last != '>' {
                return Err(self.err(
                    close,
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

    fn open_tag(
        &mut self,
        name: &'a str,
        line: usize,
        mut last: char,
    ) -> Result<Node<'a>, XmlError> {
        let mut el = Element {
            name,
            line,
            // A step has eleven attributes: one allocation, not four.
            attrs: Vec::with_capacity(12),
            children: Vec::new(),
        };
        let mut slots = 0;
        while last == ' ' {
            let (key, value, l) = self.token(el.name, true)?;
            last = l;
            if key.is_empty() && value.is_none() {
                slots += 1; // an empty entry, as the runtime stores for a doubled space
                continue;
            }
            let Some(value) = value else {
                return Err(XmlError::new(
                    self.line,
                    el.name,
                    Some(key),
                    "attribute has no value",
                ));
            };
            slots += 1;
            if el.attrs.iter().any(|(k, _)| *k == key) {
                return Err(XmlError::new(
                    self.line,
                    el.name,
                    Some(key),
                    "duplicate attribute (the runtime would read only the first)",
                ));
            }
            if slots > MAX_ATTRS {
                return Err(XmlError::new(self.line, el.name, Some(key), format!(
                    "more than {MAX_ATTRS} attributes: the runtime ignores this one and any after it"
                )));
            }
            el.attrs.push((key, value));
        }
        if last == '/' {
            let c = self.next_char(el.name)?;
            if c != '>' {
                return Err(self.err(
                    el.name,
                    format!("XML Parse : expected >, got '{}'", show_char(c)),
                ));
            }
            return Ok(Node::SelfClosed(el));
        }
        if last != '>' {
            return Err(self.err(
                el.name,
                format!("XML Parse : expected >, got '{}'", show_char(last)),
            ));
        }
        Ok(Node::Open(el))
    }

    /// Reads the children of an open element, `depth` levels deep, up to its closing tag,
    /// handing each to `child` as soon as it is complete.
    fn children(
        &mut self,
        el: &Element<'a>,
        depth: usize,
        child: &mut dyn FnMut(Element<'a>) -> Result<(), XmlError>,
    ) -> Result<(), XmlError> {
        if depth > MAX_DEPTH {
            return Err(self.err(
                el.name,
                format!("elements nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        loop {
            match self.node()? {
                None => return Err(self.err(el.name, "XML Parse : Unexpected EOF")),
                Some(Node::Close(name, line)) => {
                    if name != el.name {
                        return Err(XmlError::new(
                            line,
                            el.name,
                            None,
                            format!("XML Mismatch : {} / {name}", el.name),
                        ));
                    }
                    return Ok(());
                }
                Some(Node::SelfClosed(c)) => child(c)?,
                Some(Node::Open(mut c)) => {
                    let mut grandchildren = Vec::new();
                    self.children(&c, depth + 1, &mut |g| {
                        grandchildren.push(g);
                        Ok(())
                    })?;
                    c.children = grandchildren;
                    child(c)?;
                }
            }
        }
    }
}

/// Parses a document: comments, then exactly one top element (with its subtree), then only
/// comments or whitespace.
pub fn parse_document(text: &str) -> Result<Element<'_>, XmlError> {
    let mut children = Vec::new();
    let mut top = parse_streaming(text, |_, c| {
        children.push(c);
        Ok(())
    })?;
    top.children = children;
    Ok(top)
}

/// [`parse_document`] one child of the top element at a time: `child` gets the top element
/// (without its children) and each child with its subtree as soon as it is read, so a large
/// document is never held as a tree. Returns the top element without its children.
pub fn parse_streaming<'a>(
    text: &'a str,
    mut child: impl FnMut(&Element<'a>, Element<'a>) -> Result<(), XmlError>,
) -> Result<Element<'a>, XmlError> {
    let mut lx = Lexer {
        text,
        pos: 0,
        line: 1,
    };
    let top = match lx.node()? {
        None => return Err(lx.err("", "XML Parse : Unexpected EOF (no element)")),
        Some(Node::Close(name, line)) => {
            return Err(XmlError::new(
                line,
                name,
                None,
                format!("XML Mismatch : (none) / {name}"),
            ))
        }
        Some(Node::SelfClosed(el)) => el,
        Some(Node::Open(el)) => {
            lx.children(&el, 1, &mut |c| child(&el, c))?;
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
            name,
            None,
            format!(
                "content after the closing tag of {} (the runtime reads a single algo element)",
                top.name
            ),
        ));
    }
    Ok(top)
}
