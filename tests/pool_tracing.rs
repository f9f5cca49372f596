//! A refused `allocate_block` is reported through `tracing`: a WARN event inside a span
//! named `pool_exhausted` whose fields (pool, requested, free, largest_free) are the same
//! numbers the returned `PoolError::Exhausted` carries.
//!
//! The output is captured by a small `tracing_subscriber` layer that records every event
//! with its fields and the fields of every span around it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use nebula_memory::{MemoryPool, PoolError};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

type Fields = BTreeMap<String, String>;

/// Collects field values as strings (numbers in decimal, strings as they are).
#[derive(Default)]
struct FieldMap(Fields);

impl Visit for FieldMap {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// One captured event: its level, its fields, and the spans it was in (innermost first).
#[derive(Clone, Debug)]
struct Captured {
    level: Level,
    fields: Fields,
    spans: Vec<(String, Fields)>,
}

/// The fields of a span, kept in its extensions.
struct SpanFields(Fields);

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

impl Capture {
    fn take(&self) -> Vec<Captured> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = FieldMap::default();
        attrs.record(&mut fields);
        ctx.span(id)
            .unwrap()
            .extensions_mut()
            .insert(SpanFields(fields.0));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        let mut ext = span.extensions_mut();
        if let Some(SpanFields(fields)) = ext.get_mut::<SpanFields>() {
            let mut more = FieldMap::default();
            values.record(&mut more);
            fields.extend(more.0);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = FieldMap::default();
        event.record(&mut fields);
        let spans = ctx
            .event_scope(event)
            .map(|scope| {
                scope
                    .map(|span| {
                        let ext = span.extensions();
                        let fields = ext
                            .get::<SpanFields>()
                            .map(|f| f.0.clone())
                            .unwrap_or_default();
                        (span.name().to_owned(), fields)
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.0.lock().unwrap().push(Captured {
            level: *event.metadata().level(),
            fields: fields.0,
            spans,
        });
    }
}

fn expected_fields(err: &PoolError) -> Fields {
    let PoolError::Exhausted {
        pool,
        requested,
        free,
        largest_free,
    } = *err
    else {
        panic!("expected Exhausted, got {err:?}");
    };
    [
        ("pool", pool.to_owned()),
        ("requested", requested.to_string()),
        ("free", free.to_string()),
        ("largest_free", largest_free.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Asserts that `event` is the WARN report of `err`.
fn assert_reports(event: &Captured, err: &PoolError) {
    let expected = expected_fields(err);
    assert_eq!(event.level, Level::WARN, "{event:?}");
    let (name, span_fields) = event
        .spans
        .iter()
        .find(|(name, _)| name == "pool_exhausted")
        .unwrap_or_else(|| panic!("event outside a pool_exhausted span: {event:?}"));
    assert_eq!(name, "pool_exhausted");
    for (k, v) in &expected {
        assert_eq!(
            span_fields.get(k),
            Some(v),
            "span field {k}: {span_fields:?}"
        );
    }
    // The event carries the numbers too, and its message names the pool.
    for (k, v) in &expected {
        assert_eq!(event.fields.get(k), Some(v), "event field {k}: {event:?}");
    }
    let message = event.fields.get("message").expect("event has a message");
    assert!(
        message.contains(&format!("'{}'", expected["pool"])),
        "{message}"
    );
}

#[test]
fn exhaustion_emits_a_warn_event_in_a_pool_exhausted_span() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::with_default(subscriber, || {
        let pool = MemoryPool::new("traced", 256 << 10).unwrap();
        let a = pool.allocate_block(100 << 10).unwrap();
        let b = pool.allocate_block(100 << 10).unwrap();
        // SAFETY: from `pool`, not used afterwards.
        unsafe { pool.free_block(a) };
        // Successful operations report nothing at WARN.
        let noise: Vec<_> = capture
            .take()
            .into_iter()
            .filter(|e| e.level <= Level::WARN)
            .collect();
        assert!(noise.is_empty(), "{noise:?}");

        // Two free ranges of ~100 KiB and ~56 KiB: 120 KiB fits in neither.
        let err = pool.allocate_block(120 << 10).unwrap_err();
        let s = pool.stats();
        assert!(matches!(
            err,
            PoolError::Exhausted {
                pool: "traced",
                requested: 122_880,
                ..
            }
        ));
        assert_eq!(expected_fields(&err)["free"], s.free.to_string());
        assert_eq!(
            expected_fields(&err)["largest_free"],
            s.largest_free.to_string()
        );
        let events = capture.take();
        let warns: Vec<_> = events.iter().filter(|e| e.level == Level::WARN).collect();
        assert_eq!(warns.len(), 1, "{events:?}");
        assert_reports(warns[0], &err);

        // A second refusal, with different numbers, is reported with those numbers.
        let c = pool.allocate_block(s.largest_free).unwrap();
        let err2 = pool.allocate_block(s.largest_free).unwrap_err();
        assert_ne!(err2, err);
        let events = capture.take();
        let warns: Vec<_> = events.iter().filter(|e| e.level == Level::WARN).collect();
        assert_eq!(warns.len(), 1, "{events:?}");
        assert_reports(warns[0], &err2);
        assert_eq!(pool.stats().exhaustions, 2);

        // SAFETY: from `pool`, not used afterwards.
        unsafe { pool.free_block(b) };
        // SAFETY: as above.
        unsafe { pool.free_block(c) };
    });
}

#[test]
fn exhaustion_of_a_full_pool_reports_zero_largest_free() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::with_default(subscriber, || {
        let pool = MemoryPool::new("full", 64 << 10).unwrap();
        let all = pool.allocate_block(pool.stats().largest_free).unwrap();
        let err = pool.allocate_block(1).unwrap_err();
        assert_eq!(
            err,
            PoolError::Exhausted {
                pool: "full",
                requested: 1,
                // A pool that grows by segments (the web) keeps a header at its end.
                free: if pool.grows_by_segments() { 32 } else { 0 },
                largest_free: 0
            }
        );
        let warns: Vec<_> = capture
            .take()
            .into_iter()
            .filter(|e| e.level == Level::WARN)
            .collect();
        assert_eq!(warns.len(), 1);
        assert_reports(&warns[0], &err);
        // SAFETY: from `pool`, not used afterwards.
        unsafe { pool.free_block(all) };
    });
}
