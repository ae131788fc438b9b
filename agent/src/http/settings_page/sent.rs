//! The "What was sent" section: the last events the ingest accepted (or already had), each with its
//! redacted JSON byte for byte as it left the device ([`crate::outbox::SentEvent`], kept by the ack in
//! the outbox's ring of sent events). Only acked events are there: nothing pending, refused, exported
//! or purged.
//!
//! Hooks: `section#sent`, `[data-field=sent]` (the list, or the sentence saying nothing was sent),
//! `li[data-sent=<event_id>]`, `pre[data-field=sent_body]`.

use maud::{html, Markup};

use crate::outbox::SentEvent;

/// The section.
pub(super) fn sent_section(sent: &[SentEvent], kept: usize) -> Markup {
    html! {
        section #sent aria-labelledby="sent-title" {
            h2 #sent-title { "What was sent" }
            @if sent.is_empty() {
                p.none data-field="sent" { "Nothing has been sent from this device yet." }
            } @else {
                p { "The last " (sent.len()) " events the server received from this device (at most "
                    (kept) "), newest first, exactly as they left: after redaction, with only the fields \
                    listed under " a href="#shared-title" { "What is shared" } "." }
                ol.sent data-field="sent" {
                    @for e in sent {
                        li data-sent=(e.event_id) {
                            details {
                                summary {
                                    code { (e.kind) } " · occurred " (e.occurred_at.format("%Y-%m-%d %H:%M:%S UTC"))
                                    " · " @if e.duplicate { "already on the server, " }
                                    "sent " (e.sent_at.format("%Y-%m-%d %H:%M:%S UTC"))
                                }
                                pre data-field="sent_body" { (e.body) }
                            }
                        }
                    }
                }
            }
        }
    }
}
