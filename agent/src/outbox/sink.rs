//! The outbox as the log tailer's [`TailSink`]: items and checkpoint in one transaction.

use std::future::Future;

use super::deliver::colony::ColonyKeys;
use super::handle::Outbox;
use super::record::item::{Item, PreparedEvent};
use crate::tail::sink::{Checkpoint, ColonyKeySource, TailItem, TailSink};

impl ColonyKeySource for ColonyKeys {
    fn keyer(&self) -> apiary_schema::colony::ColonyKeyer {
        ColonyKeys::keyer(self)
    }
}

impl TailSink for Outbox {
    fn commit(
        &self,
        items: Vec<TailItem>,
        checkpoint: Checkpoint,
    ) -> impl Future<Output = anyhow::Result<()>> + Send {
        let items: Vec<Item> = items
            .into_iter()
            .map(|item| match item {
                TailItem::Processed(outcome) => Item::from_outcome(&outcome),
                TailItem::Kept(event, contribution) => {
                    Item::Kept(PreparedEvent::with_contribution(&event, Ok(contribution)))
                }
                TailItem::Malformed {
                    source_key,
                    line_no,
                    offset,
                    reason,
                } => Item::Malformed {
                    source: source_key,
                    line_no: Some(line_no),
                    offset: Some(offset),
                    reason,
                },
            })
            .collect();
        let outbox = self.clone();
        async move {
            outbox.submit_with_checkpoint(items, checkpoint).await?;
            Ok(())
        }
    }

    fn load_checkpoints(&self) -> impl Future<Output = anyhow::Result<Vec<Checkpoint>>> + Send {
        let outbox = self.clone();
        async move { Ok(outbox.checkpoints().await?) }
    }
}
