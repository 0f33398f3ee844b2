//! The JSON form of a [`Collective`] in synth's algorithm files: its kind, ranks, root and
//! C, and its chunks only when custom (a named collective's follow from the rest; read back,
//! they are rebuilt, within the file limits [`MAX_FILE_CHUNKS`] and [`MAX_FILE_PIECES`]).

use super::{MAX_FILE_CHUNKS, MAX_FILE_PIECES};
use crate::collective::{Chunk, Collective, Kind};
use serde::{Deserialize, Serialize};

/// The JSON form of a [`Collective`]: its chunks only when custom (or when an older file
/// lists them).
#[derive(Serialize, Deserialize)]
struct CollectiveFile {
    kind: Kind,
    ranks: usize,
    root: usize,
    chunks_per_rank: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chunks: Option<Vec<Chunk>>,
}

impl Serialize for Collective {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        CollectiveFile {
            kind: self.kind,
            ranks: self.ranks,
            root: self.root,
            chunks_per_rank: self.chunks_per_rank,
            chunks: (self.kind == Kind::Custom).then(|| self.chunks.clone()),
        }
        .serialize(serializer)
    }
}

impl TryFrom<CollectiveFile> for Collective {
    type Error = String;

    fn try_from(file: CollectiveFile) -> Result<Collective, String> {
        let chunks = match file.chunks {
            Some(chunks) => chunks,
            None if file.kind == Kind::Custom => {
                return Err("a custom collective lists its chunks".into())
            }
            None => {
                // Bounded before anything is allocated (a file may claim any size).
                let (max_c, max_pieces) = (MAX_FILE_CHUNKS, MAX_FILE_PIECES);
                if file.chunks_per_rank == 0 || file.chunks_per_rank > max_c {
                    return Err(format!(
                        "chunks_per_rank: {} is not in 1..={max_c}",
                        file.chunks_per_rank
                    ));
                }
                crate::topology::check_size(file.ranks, 0).map_err(|e| format!("ranks: {e:#}"))?;
                let pieces = file
                    .ranks
                    .saturating_mul(file.ranks)
                    .saturating_mul(file.chunks_per_rank);
                if pieces > max_pieces {
                    return Err(format!("more than {max_pieces} chunks"));
                }
                Collective::new(file.kind, file.ranks, file.root, file.chunks_per_rank)
                    .map_err(|e| format!("{e:#}"))?
                    .chunks
            }
        };
        Ok(Collective {
            kind: file.kind,
            ranks: file.ranks,
            root: file.root,
            chunks_per_rank: file.chunks_per_rank,
            chunks,
        })
    }
}

impl<'de> Deserialize<'de> for Collective {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let file = CollectiveFile::deserialize(deserializer)?;
        Collective::try_from(file).map_err(serde::de::Error::custom)
    }
}
