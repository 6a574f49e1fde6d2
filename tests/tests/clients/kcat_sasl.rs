//! kcat over TLS with SASL/PLAIN, the password one of the node's tokens: the right token
//! produces and consumes, a wrong one and a client without SASL are turned away.

use std::time::Duration;

const TOKEN: &str = "kafka-sasl-token-0123456789";

/// kcat's answer: (succeeded, stdout, stderr).
async fn kcat(args: Vec<String>) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let all: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = mink_tests::run_client(&mink_tests::kcat(), &all, Duration::from_secs(60))
            .expect("kcat starts");
        (run.success, run.stdout, run.stderr)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_authenticates_with_a_token_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (dir.path().join("node.crt"), dir.path().join("node.key"));
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    let node = super::memory_node(|s| {
        s.kafka.listen = Some("127.0.0.1:0".parse().unwrap());
        s.kafka.auto_create_topics = true;
        s.http.tls.cert_file = Some(cert.clone());
        s.http.tls.key_file = Some(key.clone());
        s.auth.token = Some(mink_server::settings::Secret::new(TOKEN));
    })
    .await;
    let broker = node.kafka_addr().expect("kafka listens").to_string();
    let ca = cert.display().to_string();
    let secured = |password: &str, more: &[&str]| {
        let mut args: Vec<String> = [
            "-b",
            &broker,
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            "sasl.mechanisms=PLAIN",
            "-X",
            "sasl.username=anyone",
            "-X",
            &format!("sasl.password={password}"),
            "-X",
            &format!("ssl.ca.location={ca}"),
            // The certificate names localhost; kcat dials the address.
            "-X",
            "ssl.endpoint.identification.algorithm=none",
        ]
        .map(str::to_owned)
        .to_vec();
        args.extend(more.iter().map(|s| (*s).to_owned()));
        args
    };
    let file = dir.path().join("records");
    std::fs::write(&file, "k1:one\nk2:two\n").unwrap();
    let (ok, out, err) = kcat(secured(
        TOKEN,
        &["-P", "-t", "safe", "-K", ":", "-l", file.to_str().unwrap()],
    ))
    .await;
    assert!(ok, "{out}\n{err}");
    let (ok, out, err) = kcat(secured(
        TOKEN,
        &[
            "-C",
            "-t",
            "safe",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%k=%s\\n",
        ],
    ))
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["k1=one", "k2=two"]);

    // A wrong token: authentication fails and nothing is listed.
    let (ok, out, err) = kcat(secured("not-the-token", &["-L", "-m", "5"])).await;
    assert!(!ok, "{out}");
    assert!(
        err.contains("Authentication failed") || err.contains("SASL"),
        "{err}"
    );
    // TLS without SASL: the node serves nothing but ApiVersions and SASL.
    let (ok, out, err) = kcat(vec![
        "-b".into(),
        broker.clone(),
        "-X".into(),
        "security.protocol=SSL".into(),
        "-X".into(),
        format!("ssl.ca.location={ca}"),
        "-X".into(),
        "ssl.endpoint.identification.algorithm=none".into(),
        "-L".into(),
        "-m".into(),
        "5".into(),
    ])
    .await;
    assert!(!ok, "{out}\n{err}");
    assert!(!out.contains("topic \"safe\""), "{out}");
    node.shutdown().await.unwrap();
}
