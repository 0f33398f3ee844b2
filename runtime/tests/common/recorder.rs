//! A [`Driver`] that records every call, for the host-only tests of the CUDA launcher.

use anyhow::Result;
use runtime::cuda::launch::{ComputeCall, CopyCall, Driver, EventId, KernelCall, StreamId};

/// One driver call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    BeginCapture,
    EndCapture,
    Record(EventId, StreamId),
    Wait(StreamId, EventId),
    Copy(usize, CopyCall),
    Launch(usize, KernelCall),
    Compute(usize, ComputeCall),
}

/// The calls in the order they were made.
#[derive(Debug, Default)]
pub struct Recorder {
    pub calls: Vec<Call>,
}

impl Driver for Recorder {
    fn begin_capture(&mut self) -> Result<()> {
        self.calls.push(Call::BeginCapture);
        Ok(())
    }
    fn end_capture(&mut self) -> Result<()> {
        self.calls.push(Call::EndCapture);
        Ok(())
    }
    fn record(&mut self, event: EventId, stream: StreamId) -> Result<()> {
        self.calls.push(Call::Record(event, stream));
        Ok(())
    }
    fn wait(&mut self, stream: StreamId, event: EventId) -> Result<()> {
        self.calls.push(Call::Wait(stream, event));
        Ok(())
    }
    fn copy(&mut self, stream: usize, call: &CopyCall) -> Result<()> {
        self.calls.push(Call::Copy(stream, *call));
        Ok(())
    }
    fn launch(&mut self, stream: usize, call: &KernelCall) -> Result<()> {
        self.calls.push(Call::Launch(stream, call.clone()));
        Ok(())
    }
    fn compute(&mut self, stream: usize, call: &ComputeCall) -> Result<()> {
        self.calls.push(Call::Compute(stream, call.clone()));
        Ok(())
    }
}
