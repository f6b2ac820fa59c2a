//! rmcp's Streamable HTTP client with the remote server's OAuth token on every request: the
//! current token (renewed when close to expiry), and after a 401 one renewal and one retry.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::Sse;

use super::{OAuthError, TokenSource};

#[derive(Clone)]
pub struct OAuthHttp {
    pub inner: reqwest::Client,
    pub tokens: Arc<TokenSource>,
}

type Failure = StreamableHttpError<reqwest::Error>;

/// A token that cannot be had fails the request with the reason (a login to do, the
/// authorization server's answer).
fn failure(e: OAuthError) -> Failure {
    StreamableHttpError::Io(std::io::Error::other(e.to_string()))
}

impl OAuthHttp {
    /// `send` with the current token; after a 401, once more with a renewed one.
    async fn with_token<T, F, Fut>(&self, send: F) -> Result<T, Failure>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let token = self.tokens.token().await.map_err(failure)?;
        match send(token.clone()).await {
            Err(StreamableHttpError::AuthRequired(_)) => {
                let token = self.tokens.renew(&token).await.map_err(failure)?;
                send(token).await
            }
            other => other,
        }
    }
}

impl StreamableHttpClient for OAuthHttp {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, Failure>> + Send + '_ {
        self.post_message_with_max_sse_event_size(
            uri,
            message,
            session_id,
            None,
            custom_headers,
            usize::MAX,
        )
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        self.with_token(|token| {
            self.inner.post_message_with_max_sse_event_size(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                Some(token),
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Failure> {
        self.with_token(|token| {
            self.inner.delete_session(
                uri.clone(),
                session_id.clone(),
                Some(token),
                custom_headers.clone(),
            )
        })
        .await
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<BoxStream<'static, Result<Sse, SseError>>, Failure>> + Send + '_
    {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            None,
            custom_headers,
            usize::MAX,
        )
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failure> {
        self.with_token(|token| {
            self.inner.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                Some(token),
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}
