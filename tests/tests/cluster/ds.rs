//! Durable Streams on two nodes: a stream created through either node, with its first message,
//! lives on the node its bucket is placed on (the create goes there first), streams spread over
//! both nodes, and every request for a stream through the other node is redirected (307) to its
//! owner, so a client that follows redirects sees one stream whichever node it asks.

use std::collections::BTreeSet;

use super::harness::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_live_where_they_are_placed_and_requests_follow_redirects() {
    let cluster = Cluster::start("cluster-ds", 2).await;
    let follow = reqwest::Client::new();
    let stay = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut owners = BTreeSet::new();
    for i in 0..6 {
        let name = format!("s{i}");
        let via = i % 2;
        let url = |n: usize| format!("{}/ds/v1/stream/{name}", cluster.url(n));
        let created = follow
            .put(url(via))
            .header("content-type", "text/plain")
            .body(format!("m{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201, "{name} through node {via}");
        let appended = follow
            .post(url(1 - via))
            .header("content-type", "text/plain")
            .body("!")
            .send()
            .await
            .unwrap();
        assert_eq!(
            appended.status(),
            204,
            "{name} appended through node {}",
            1 - via
        );
        for n in 0..2 {
            let read = follow
                .get(format!("{}?offset=-1", url(n)))
                .send()
                .await
                .unwrap();
            assert_eq!(read.status(), 200);
            assert_eq!(
                read.text().await.unwrap(),
                format!("m{i}!"),
                "{name} via node {n}"
            );
        }
        let owner = cluster.owners(0, &format!("ds.{name}")).await[&0];
        owners.insert(owner);
        let other = 1 - owner;
        let redirected = stay
            .get(format!("{}?offset=-1", url(other)))
            .send()
            .await
            .unwrap();
        assert_eq!(redirected.status(), 307, "{name} asked of node {other}");
        let location = redirected.headers()["location"].to_str().unwrap();
        assert!(
            location.starts_with(&format!("{}/ds/v1/stream/{name}?", cluster.url(owner))),
            "{location}"
        );
        let served = stay.head(url(owner)).send().await.unwrap();
        assert_eq!(served.status(), 200);
        assert_eq!(
            served.headers()["stream-next-offset"],
            "00000000000000000002"
        );
    }
    assert_eq!(owners.len(), 2, "the streams are spread over both nodes");
}
