//! Id allocators: concurrent allocators on two handles never hand out the same id.

use std::collections::HashSet;
use std::sync::Arc;

use mink_metadata::{IdAllocator, IdKind};

use super::Fixture;

pub(super) async fn concurrent_allocators_never_repeat_an_id(f: Fixture) {
    let mut tasks = Vec::new();
    for i in 0..6 {
        let kv = if i % 2 == 0 {
            Arc::clone(&f.kv)
        } else {
            Arc::clone(&f.other)
        };
        tasks.push(tokio::spawn(async move {
            let alloc = Arc::new(IdAllocator::new(kv, IdKind::Writer, 7));
            let mut inner = Vec::new();
            // Two concurrent users of one allocator, too.
            for _ in 0..2 {
                let alloc = Arc::clone(&alloc);
                inner.push(tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for _ in 0..40 {
                        ids.push(alloc.next().await.unwrap());
                    }
                    ids
                }));
            }
            let mut ids = Vec::new();
            for t in inner {
                ids.extend(t.await.unwrap());
            }
            ids
        }));
    }
    let mut seen = HashSet::new();
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(seen.insert(id), "id {id} handed out twice");
        }
    }
    assert_eq!(seen.len(), 6 * 80);
    // A new allocator after all of them (a restart) continues past every block handed out.
    let max = *seen.iter().max().unwrap();
    let fresh = IdAllocator::new(Arc::clone(&f.kv), IdKind::Writer, 7)
        .next()
        .await
        .unwrap();
    assert!(fresh > max, "fresh id {fresh} must exceed {max}");
    // Kinds are independent spaces.
    let stream_id = IdAllocator::new(f.kv, IdKind::Stream, 7)
        .next()
        .await
        .unwrap();
    assert_eq!(stream_id, 0);
}
