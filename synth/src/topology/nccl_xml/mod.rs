//! Import of NCCL's topology dump (`NCCL_TOPO_DUMP_FILE=system.xml`), as NCCL writes it:
//! `<system>` holds `<cpu>` (NUMA domains, with `arch`, `vendor`, `familyid`, `modelid`),
//! nested `<pci>` (bus ids with `link_speed` and `link_width`), `<gpu>` (with `dev` and
//! `sm`) carrying `<nvlink target count tclass>` and `<c2c>`, and `<nic>` holding `<net>`
//! (with `speed` in Mb/s).
//!
//! [`read`] turns the text into a [`Machine`] (what the file says, checked); [`fabric`]
//! turns a machine into a [`Topology`](super::Topology) with its NIC facts. Every error is
//! one line naming the line and the element.

pub mod fabric;
pub mod toml_out;

use thiserror::Error;

/// What went wrong reading an NCCL topology XML file.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum XmlError {
    /// The text is not well-formed XML.
    #[error("line {line}: malformed XML: {reason}")]
    Syntax {
        /// 1-based line.
        line: u32,
        /// The parser's reason.
        reason: String,
    },
    /// An element is missing an attribute, has a bad value or sits in the wrong place.
    #[error("line {line}: <{element}>: {reason}")]
    Element {
        /// 1-based line of the element.
        line: u32,
        /// The element's tag.
        element: String,
        /// What is wrong.
        reason: String,
    },
    /// The file as a whole does not describe a machine synth can model.
    #[error("{0}")]
    Machine(String),
}

impl XmlError {
    /// The 1-based line the error points at, if any.
    pub fn line(&self) -> Option<u32> {
        match self {
            XmlError::Syntax { line, .. } | XmlError::Element { line, .. } => Some(*line),
            XmlError::Machine(_) => None,
        }
    }
}

/// A PCI bus id `domain:bus:device.function`, as numbers (NCCL writes them in lowercase hex,
/// with a domain of 4 or 8 digits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BusId {
    /// PCI domain.
    pub domain: u32,
    /// Bus.
    pub bus: u32,
    /// Device.
    pub device: u32,
    /// Function.
    pub function: u32,
}

impl BusId {
    /// Parses `0000:07:00.0`.
    pub fn parse(text: &str) -> Option<BusId> {
        let (rest, function) = text.trim().rsplit_once('.')?;
        let mut parts = rest.split(':');
        let (domain, bus, device) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let hex = |s: &str| {
            if s.is_empty() || s.len() > 8 {
                None
            } else {
                u32::from_str_radix(s, 16).ok()
            }
        };
        Some(BusId {
            domain: hex(domain)?,
            bus: hex(bus)?,
            device: hex(device)?,
            function: hex(function)?,
        })
    }

    /// The collapsed id NCCL gives NVSwitches it cannot see (inside VMs): all ones.
    pub fn is_collapsed(&self) -> bool {
        self.bus & 0xff == 0xff && self.device == 0xff
    }
}

impl std::fmt::Display for BusId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// One `<pci>` element on the way from a CPU to a device (a switch port or the device's own
/// slot), with the bandwidth of its link to its parent where the file gives one.
#[derive(Debug, Clone, PartialEq)]
pub struct PciHop {
    /// Its bus id.
    pub busid: BusId,
    /// GB/s per direction of its link to its parent (`link_speed` x `link_width`, NCCL's
    /// effective rate), `None` where the file gives no speed.
    pub bandwidth: Option<f64>,
}

/// What a GPU's NVLinks lead to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvTarget {
    /// Another GPU (by its bus id).
    Gpu(BusId),
    /// An NVSwitch (seen, or collapsed to `ffff...:ff:ff.0` inside a VM).
    Switch,
    /// A CPU (POWER9's NVLinks to the host), not used for GPU-to-GPU traffic.
    Cpu,
}

/// One `<nvlink>` of a GPU: `count` links to `target`.
#[derive(Debug, Clone, PartialEq)]
pub struct NvLink {
    /// Where the links go.
    pub target: NvTarget,
    /// How many links.
    pub count: u32,
    /// Line of the element.
    pub line: u32,
}

/// Where a device sits: its NUMA domain (index into [`Machine::cpus`]) and its `<pci>`
/// chain from the CPU down to its own slot (empty when it hangs off the CPU directly).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Place {
    /// Index of its CPU in [`Machine::cpus`].
    pub cpu: usize,
    /// The `<pci>` elements above it, outermost first.
    pub chain: Vec<PciHop>,
}

/// One `<gpu>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// CUDA device index (`dev`).
    pub dev: usize,
    /// Compute capability times ten (`sm`: 70, 80, 90, ...).
    pub sm: u32,
    /// Bus id of its slot (the enclosing `<pci>`).
    pub busid: Option<BusId>,
    /// Where it sits.
    pub place: Place,
    /// Its NVLinks.
    pub nvlinks: Vec<NvLink>,
    /// Line of the element.
    pub line: u32,
}

/// One `<net>` (a NIC port NCCL can use).
#[derive(Debug, Clone, PartialEq)]
pub struct Net {
    /// Device name (`mlx5_0`).
    pub name: String,
    /// Speed in GB/s per direction (`speed` is in Mb/s).
    pub bandwidth: f64,
    /// Where its NIC sits.
    pub place: Place,
    /// Line of the element.
    pub line: u32,
}

/// One `<cpu>` (NUMA domain).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cpu {
    /// `numaid`.
    pub numaid: i64,
    /// `arch` (`x86_64`, `arm64`, `ppc64`).
    pub arch: String,
    /// `vendor` (`GenuineIntel`, `AuthenticAMD`).
    pub vendor: String,
    /// `modelid`.
    pub model: u32,
}

/// A machine as an NCCL topology dump describes it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Machine {
    /// NUMA domains, in file order.
    pub cpus: Vec<Cpu>,
    /// GPUs, by CUDA device index.
    pub gpus: Vec<Gpu>,
    /// NIC ports, in file order.
    pub nets: Vec<Net>,
}

/// Whether `text` looks like an NCCL topology dump (its first element is `<system`).
pub fn looks_like_nccl_xml(text: &str) -> bool {
    let mut rest = text.trim_start_matches('\u{feff}').trim_start();
    loop {
        if let Some(r) = rest.strip_prefix("<?") {
            match r.find("?>") {
                Some(end) => rest = r[end + 2..].trim_start(),
                None => return false,
            }
        } else if let Some(r) = rest.strip_prefix("<!--") {
            match r.find("-->") {
                Some(end) => rest = r[end + 3..].trim_start(),
                None => return false,
            }
        } else {
            return rest.starts_with("<system");
        }
    }
}

/// Most GPUs, NICs or CPUs one file may describe (no machine has more; guards the work).
pub const MAX_DEVICES: usize = 1024;

/// Reads an NCCL topology dump.
pub fn read(text: &str) -> Result<Machine, XmlError> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: false,
        nodes_limit: 1_000_000,
        ..Default::default()
    };
    let doc =
        roxmltree::Document::parse_with_options(text, opts).map_err(|e| XmlError::Syntax {
            line: e.pos().row,
            reason: crate::util::escape_line_breaks(&e.to_string()),
        })?;
    let mut reader = Reader {
        doc: &doc,
        machine: Machine::default(),
    };
    let root = doc.root_element();
    if root.tag_name().name() != "system" {
        return Err(reader.err(root, "the root element must be <system>"));
    }
    for child in root.children().filter(|n| n.is_element()) {
        match child.tag_name().name() {
            "cpu" => reader.cpu(child)?,
            // NICs NCCL could not place (no PCI path) hang off the system directly.
            "nic" => {
                let place = Place {
                    cpu: usize::MAX,
                    chain: Vec::new(),
                };
                reader.nic(child, &place)?;
            }
            // GPUs and NICs are all that NCCL's dump holds; anything else is a different file.
            other => {
                return Err(reader.err(child, &format!("unexpected element <{other}> in <system>")))
            }
        }
    }
    reader.finish()
}

struct Reader<'d, 'i> {
    doc: &'d roxmltree::Document<'i>,
    machine: Machine,
}

type XNode<'d, 'i> = roxmltree::Node<'d, 'i>;

impl<'d, 'i> Reader<'d, 'i> {
    fn line(&self, node: XNode) -> u32 {
        self.doc.text_pos_at(node.range().start).row
    }

    fn err(&self, node: XNode, reason: &str) -> XmlError {
        XmlError::Element {
            line: self.line(node),
            element: node.tag_name().name().to_string(),
            reason: crate::util::escape_line_breaks(reason),
        }
    }

    fn attr<'a>(&self, node: XNode<'a, 'i>, name: &str) -> Result<&'a str, XmlError> {
        node.attribute(name)
            .ok_or_else(|| self.err(node, &format!("missing attribute {name}")))
    }

    fn int_attr(&self, node: XNode, name: &str) -> Result<i64, XmlError> {
        let text = self.attr(node, name)?;
        parse_int(text).ok_or_else(|| {
            let shown: String = text.chars().take(40).collect();
            self.err(node, &format!("{name}=\"{shown}\" is not an integer"))
        })
    }

    fn check_count(&self, node: XNode, what: usize) -> Result<(), XmlError> {
        if what >= MAX_DEVICES {
            return Err(self.err(
                node,
                &format!("more than {MAX_DEVICES} devices in one file"),
            ));
        }
        Ok(())
    }

    fn cpu(&mut self, node: XNode) -> Result<(), XmlError> {
        self.check_count(node, self.machine.cpus.len())?;
        let numaid = match node.attribute("numaid") {
            Some(_) => self.int_attr(node, "numaid")?,
            None => -1,
        };
        let model = match node.attribute("modelid") {
            Some(_) => u32::try_from(self.int_attr(node, "modelid")?).unwrap_or(0),
            None => 0,
        };
        let cpu = Cpu {
            numaid,
            arch: node.attribute("arch").unwrap_or("").to_string(),
            vendor: node.attribute("vendor").unwrap_or("").to_string(),
            model,
        };
        let index = self.machine.cpus.len();
        self.machine.cpus.push(cpu);
        let place = Place {
            cpu: index,
            chain: Vec::new(),
        };
        self.children(node, &place)
    }

    /// The children of a `<cpu>` or `<pci>` at `place`.
    fn children(&mut self, node: XNode, place: &Place) -> Result<(), XmlError> {
        for child in node.children().filter(|n| n.is_element()) {
            match child.tag_name().name() {
                "pci" => self.pci(child, place)?,
                "nic" => self.nic(child, place)?,
                "gpu" => self.gpu(child, place)?,
                // NCCL's newer dumps name PCI links between switches; they add no bandwidth.
                "pcilink" => {}
                other => {
                    return Err(self.err(
                        child,
                        &format!(
                            "unexpected element <{other}> in <{}>",
                            node.tag_name().name()
                        ),
                    ))
                }
            }
        }
        Ok(())
    }

    fn pci(&mut self, node: XNode, place: &Place) -> Result<(), XmlError> {
        if place.chain.len() > 64 {
            return Err(self.err(node, "<pci> nested more than 64 deep"));
        }
        let text = self.attr(node, "busid")?;
        let busid = BusId::parse(text).ok_or_else(|| {
            let shown: String = text.chars().take(40).collect();
            self.err(
                node,
                &format!("busid=\"{shown}\" is not a PCI bus id (like 0000:07:00.0)"),
            )
        })?;
        let bandwidth = self.pci_bandwidth(node)?;
        let mut inner = place.clone();
        inner.chain.push(PciHop { busid, bandwidth });
        self.children(node, &inner)
    }

    /// NCCL's effective rate of a `<pci>` link: `link_width` lanes at `link_speed` GT/s, 3/32
    /// GB/s per lane per GT/s (12 GB/s for Gen3 x16, 24 for Gen4, 48 for Gen5). `None` where
    /// the speed is empty or unknown (virtual devices).
    fn pci_bandwidth(&self, node: XNode) -> Result<Option<f64>, XmlError> {
        let speed = node.attribute("link_speed").unwrap_or("").trim();
        let gts = speed
            .split_whitespace()
            .next()
            .and_then(|s| s.parse::<f64>().ok());
        let Some(gts) = gts else {
            if speed.is_empty() || speed.starts_with("Unknown") {
                return Ok(None);
            }
            let shown: String = speed.chars().take(40).collect();
            return Err(self.err(
                node,
                &format!("link_speed=\"{shown}\" is not like \"16.0 GT/s\""),
            ));
        };
        if !(gts > 0.0 && gts <= 256.0) {
            return Err(self.err(node, &format!("link_speed {gts} GT/s is out of range")));
        }
        let width = match node.attribute("link_width").map(str::trim) {
            None | Some("") | Some("0") => 16,
            Some(_) => self.int_attr(node, "link_width")?,
        };
        if !(1..=64).contains(&width) {
            return Err(self.err(node, &format!("link_width {width} is not between 1 and 64")));
        }
        Ok(Some(width as f64 * gts * 3.0 / 32.0))
    }

    fn gpu(&mut self, node: XNode, place: &Place) -> Result<(), XmlError> {
        self.check_count(node, self.machine.gpus.len())?;
        let dev = self.int_attr(node, "dev")?;
        let dev = usize::try_from(dev)
            .ok()
            .filter(|&d| d < MAX_DEVICES)
            .ok_or_else(|| self.err(node, &format!("dev={dev} is out of range")))?;
        let sm = self.int_attr(node, "sm")?;
        let sm = u32::try_from(sm)
            .ok()
            .filter(|&s| (10..=1000).contains(&s))
            .ok_or_else(|| self.err(node, &format!("sm={sm} is not a compute capability")))?;
        let mut nvlinks = Vec::new();
        for child in node.children().filter(|n| n.is_element()) {
            match child.tag_name().name() {
                "nvlink" => nvlinks.push(self.nvlink(child)?),
                // Grace-Hopper's chip-to-chip link to its CPU: no GPU-to-GPU path.
                "c2c" => {}
                other => {
                    return Err(self.err(child, &format!("unexpected element <{other}> in <gpu>")))
                }
            }
        }
        self.machine.gpus.push(Gpu {
            dev,
            sm,
            busid: place.chain.last().map(|h| h.busid),
            place: place.clone(),
            nvlinks,
            line: self.line(node),
        });
        Ok(())
    }

    fn nvlink(&self, node: XNode) -> Result<NvLink, XmlError> {
        let count = self.int_attr(node, "count")?;
        let count = u32::try_from(count)
            .ok()
            .filter(|&c| (1..=64).contains(&c))
            .ok_or_else(|| self.err(node, &format!("count={count} is not between 1 and 64")))?;
        let text = self.attr(node, "target")?;
        let tclass = node
            .attribute("tclass")
            .map(|t| t.trim().to_ascii_lowercase());
        let target = if is_sentinel(text) {
            // NVSwitches NCCL cannot see (inside VMs) collapse to one sentinel target.
            NvTarget::Switch
        } else {
            let busid = BusId::parse(text).ok_or_else(|| {
                let shown: String = text.chars().take(40).collect();
                self.err(node, &format!("target=\"{shown}\" is not a PCI bus id"))
            })?;
            match tclass.as_deref() {
                // A bridge: an NVSwitch (NCCL's reading of class 0x0680).
                Some("0x068000") => NvTarget::Switch,
                // A PCI bridge: POWER9's NVLink to the CPU.
                Some("0x060400") => NvTarget::Cpu,
                _ if busid.is_collapsed() => NvTarget::Switch,
                _ => NvTarget::Gpu(busid),
            }
        };
        Ok(NvLink {
            target,
            count,
            line: self.line(node),
        })
    }

    fn nic(&mut self, node: XNode, place: &Place) -> Result<(), XmlError> {
        for child in node.children().filter(|n| n.is_element()) {
            if child.tag_name().name() != "net" {
                let other = child.tag_name().name();
                return Err(self.err(child, &format!("unexpected element <{other}> in <nic>")));
            }
            self.check_count(child, self.machine.nets.len())?;
            let name = self.attr(child, "name")?.to_string();
            let speed = self.int_attr(child, "speed")?;
            if !(1..=100_000_000).contains(&speed) {
                return Err(self.err(child, &format!("speed={speed} Mb/s is out of range")));
            }
            self.machine.nets.push(Net {
                name,
                bandwidth: speed as f64 / 8000.0,
                place: place.clone(),
                line: self.line(child),
            });
        }
        Ok(())
    }

    /// Orders GPUs by device index and checks it and the NVLink targets.
    fn finish(mut self) -> Result<Machine, XmlError> {
        let m = &mut self.machine;
        if m.gpus.is_empty() {
            return Err(XmlError::Machine(
                "no <gpu> in the file (run NCCL with NCCL_TOPO_DUMP_FILE on a node with GPUs)"
                    .to_string(),
            ));
        }
        m.gpus.sort_by_key(|g| g.dev);
        for w in m.gpus.windows(2) {
            if w[0].dev == w[1].dev {
                return Err(XmlError::Element {
                    line: w[1].line,
                    element: "gpu".to_string(),
                    reason: format!("a second GPU with dev={}", w[0].dev),
                });
            }
        }
        let cpus = m.cpus.len();
        for net in &mut m.nets {
            if net.place.cpu == usize::MAX {
                // A NIC without a PCI path: as far as any CPU.
                net.place.cpu = cpus;
            }
        }
        for g in &m.gpus {
            for l in &g.nvlinks {
                if let NvTarget::Gpu(target) = l.target {
                    if Some(target) == g.busid {
                        return Err(XmlError::Element {
                            line: l.line,
                            element: "nvlink".to_string(),
                            reason: format!("GPU {} has NVLinks to itself ({target})", g.dev),
                        });
                    }
                }
            }
        }
        Ok(self.machine)
    }
}

/// Whether an NVLink target is NCCL's sentinel for a switch it cannot see
/// (`fffffff:ffff:ff`, also written `fffffff:ff:ff.0`).
fn is_sentinel(target: &str) -> bool {
    target.trim().to_ascii_lowercase().starts_with("fffffff:")
}

/// An integer attribute as NCCL writes them: decimal, or hex with `0x`.
fn parse_int(text: &str) -> Option<i64> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids() {
        let b = BusId::parse("0000:07:00.0").unwrap();
        assert_eq!(b.to_string(), "0000:07:00.0");
        assert!(BusId::parse("fffffff:ffff:ff.0").unwrap().is_collapsed());
        assert!(is_sentinel("fffffff:ffff:ff") && is_sentinel("fffffff:ff:ff.0"));
        assert!(BusId::parse("00000000:C7:00.0").is_some());
        assert!(BusId::parse("07:00").is_none());
        assert!(BusId::parse("0000:zz:00.0").is_none());
    }

    #[test]
    fn detects_the_format() {
        assert!(looks_like_nccl_xml(
            "<?xml version=\"1.0\"?>\n<system version=\"1\">"
        ));
        assert!(looks_like_nccl_xml("  <system version=\"2\">"));
        assert!(!looks_like_nccl_xml("name = \"x\""));
        assert!(!looks_like_nccl_xml("<algo name=\"x\">"));
    }

    #[test]
    fn errors_name_line_and_element() {
        let text = "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <gpu dev=\"0\"/>\n  </cpu>\n</system>\n";
        let e = read(text).unwrap_err();
        assert_eq!(e.to_string(), "line 3: <gpu>: missing attribute sm");
        let e = read("<system>\n<cpu>\n</system>").unwrap_err();
        assert!(matches!(e, XmlError::Syntax { line: 3, .. }), "{e}");
        let text =
            "<system>\n<cpu><pci busid=\"0000:07:00.0\" link_speed=\"fast\"/></cpu></system>";
        let e = read(text).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 2: <pci>: link_speed=\"fast\""),
            "{e}"
        );
        assert!(matches!(read("<system/>"), Err(XmlError::Machine(_))));
    }

    #[test]
    fn pci_rates() {
        let text = "<system><cpu numaid=\"0\">\
            <pci busid=\"0000:01:00.0\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">\
            <gpu dev=\"0\" sm=\"80\"/></pci>\
            <pci busid=\"0000:02:00.0\" link_speed=\"8 GT/s\" link_width=\"8\">\
            <gpu dev=\"1\" sm=\"80\"/></pci>\
            <pci busid=\"0000:03:00.0\" link_speed=\"\" link_width=\"0\">\
            <nic><net name=\"mlx5_0\" dev=\"0\" speed=\"200000\"/></nic></pci>\
            </cpu></system>";
        let m = read(text).unwrap();
        assert_eq!(m.gpus[0].place.chain[0].bandwidth, Some(24.0));
        assert_eq!(m.gpus[1].place.chain[0].bandwidth, Some(6.0));
        assert_eq!(m.nets[0].place.chain[0].bandwidth, None);
        assert_eq!(m.nets[0].bandwidth, 25.0);
    }
}
