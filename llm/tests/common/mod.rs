//! A client pointed at the loopback model server, and the SDK oracle (`sdk`), for the wire,
//! transport and live tests (each uses some of it).
#![allow(dead_code)]

pub mod sdk;

use kitbag_llm::Client;
use kitbag_llm::config::{Endpoint, Limits, ModelSpec, Provider};
use kitbag_llm::openai::Dialect;
use kitbag_testkit::llm_mock::MockLlm;

/// `provider`'s client for model `m` with key `test-key`, at the mock's address (OpenAI's base
/// URL ends in `/v1`, as the SDK's does).
pub fn client(provider: Provider, mock: &MockLlm, limits: Limits) -> Client {
    let base_url = match provider {
        Provider::Anthropic => mock.url(),
        Provider::OpenAi => format!("{}/v1", mock.url()),
    };
    let endpoint = Endpoint {
        spec: ModelSpec {
            provider,
            model: "m".into(),
        },
        base_url,
        api_key: Some("test-key".into()),
        dialect: Dialect::OpenAi,
    };
    Client::new(endpoint, limits).expect("client")
}
