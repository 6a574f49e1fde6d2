//! The node's OpenAPI document, checked by a validator nobody here wrote
//! (`openapi-spec-validator`, from PyPI): it must be a valid OpenAPI 3.1 document.

use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_valid_openapi_3_1() {
    let node = super::memory_node(|_| {}).await;
    let text = reqwest::get(format!("{}/v1/openapi.json", node.url()))
        .await
        .expect("request")
        .text()
        .await
        .expect("body");
    let dir = tempfile::tempdir().expect("folder");
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, &text).expect("write");
    let out = Command::new(mink_tests::python())
        .args([
            "-c",
            "import json, sys\nfrom openapi_spec_validator import validate\nfrom openapi_spec_validator.validation import OpenAPIV31SpecValidator\nvalidate(json.load(open(sys.argv[1])), cls=OpenAPIV31SpecValidator)\nprint('valid')",
        ])
        .arg(&file)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "the validator refused the document: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "valid");
    node.shutdown().await.expect("shutdown");
}
