//! One attempt of a hook: an HTTP request (hyper, rustls with the system's or a given CA) or a command through
//! crates/pve's runner, with secrets read when it runs ([`Recording`]) and scrubbed from every error.

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use pxfleet_spec::hooks::{
    expand, expand_json, Escape, Hook, HookAction, HookContext, HookEvent, HttpHook, SecretSource,
};

use super::QUOTE;

/// Reads secrets from the process and remembers their values, to keep them out of errors. Never reads what is
/// `protected` (the controller's own data), also when a path was made a symlink to it after the submit.
struct Recording {
    seen: RefCell<Vec<String>>,
    protected: super::Protected,
}

impl SecretSource for Recording {
    fn env(&self, name: &str) -> Option<String> {
        let v = std::env::var(name).ok()?;
        self.seen.borrow_mut().push(v.clone());
        Some(v)
    }
    fn file(&self, path: &str) -> Result<String, String> {
        if let Some(why) = self.protected.refusal(path) {
            return Err(why);
        }
        let v = std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .map_err(|e| e.to_string())?;
        self.seen.borrow_mut().push(v.clone());
        Ok(v)
    }
}

/// The forms a secret takes on its way into a request and back in an error: as is, percent-encoded (upper- and
/// lower-case hex, and `+` for spaces), JSON-escaped, and base64 (standard and URL-safe, with and without
/// padding: a Basic authorization header, a token an API echoes). Longest first, so a form is replaced whole.
fn secret_forms(secret: &str) -> Vec<String> {
    use base64::Engine as _;
    let mut pct = String::new();
    for b in secret.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            pct.push(b as char);
        } else {
            pct.push_str(&format!("%{b:02X}"));
        }
    }
    let json = serde_json::Value::String(secret.to_owned()).to_string();
    let json = json[1..json.len() - 1].to_owned();
    let engines = [
        base64::engine::general_purpose::STANDARD,
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    let mut forms = vec![
        secret.to_owned(),
        pct.clone(),
        pct.to_ascii_lowercase(),
        pct.replace("%20", "+"),
        json,
    ];
    forms.extend(engines.iter().map(|e| e.encode(secret.as_bytes())));
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms.dedup();
    forms.retain(|f| f.len() >= 3);
    forms
}

impl Recording {
    fn new() -> Recording {
        Recording::guarding(&super::Protected::default())
    }

    fn guarding(protected: &super::Protected) -> Recording {
        Recording {
            seen: RefCell::new(Vec::new()),
            protected: protected.clone(),
        }
    }

    /// `text` cut to [`QUOTE`] bytes with every secret value replaced by `***`, in every form it can take in
    /// a request or an answer ([`secret_forms`]).
    fn scrub(&self, text: &str) -> String {
        let mut t = text.trim().to_owned();
        for s in self.seen.borrow().iter().filter(|s| s.len() >= 3) {
            for form in secret_forms(s) {
                t = t.replace(form.as_str(), "***");
            }
        }
        if t.len() > QUOTE {
            let mut end = QUOTE;
            while !t.is_char_boundary(end) {
                end -= 1;
            }
            t.truncate(end);
            t.push_str("...");
        }
        t
    }
}

/// The secrets a hook needs, checked on the controller when a fleet is planned or submitted: a diagnostic per
/// missing environment variable or unreadable file, at the field's line in the file.
pub fn check_secrets(file: &str, fleet: &pxfleet_spec::Fleet) -> Vec<pxfleet_spec::Diagnostic> {
    pxfleet_spec::hooks::check_secrets(&fleet.hooks, &Recording::new())
        .into_iter()
        .map(|(path, message)| {
            let mut d =
                pxfleet_spec::Diagnostic::new(file, fleet.spans.lookup(&path), path, message);
            d.hint = Some(
                "hooks read secrets on the controller: set it in pxcontroller's environment (systemd: Environment= or EnvironmentFile=) or create the file"
                    .into(),
            );
            d
        })
        .collect()
}

/// One attempt: Ok(detail) on success.
/// `h` is resolved ([`super::HookCatalog::resolve`]); `protected` is what no `${file:}` may read.
pub(super) async fn attempt_once(
    h: &Hook,
    cx: &HookContext,
    event: HookEvent,
    protected: &super::Protected,
) -> Result<String, String> {
    match &h.action {
        HookAction::Http(http) => http_once_with(http, cx, tls_config, protected).await,
        // the runner's own limit comes after the caller's timeout, which words the error
        HookAction::Command { argv } => {
            let limit = Duration::from_secs(h.timeout_secs) + Duration::from_secs(5);
            command_once(argv, cx, event, limit, protected).await
        }
        HookAction::Use { hook, .. } => Err(format!("hook {hook} was not resolved")),
    }
}

struct Prepared {
    uri: hyper::Uri,
    method: hyper::Method,
    headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    body: Option<Vec<u8>>,
}

fn prepare(http: &HttpHook, cx: &HookContext, secrets: &Recording) -> Result<Prepared, String> {
    let url = expand(&http.url, cx, secrets, Escape::Url).map_err(|e| format!("url: {e}"))?;
    let uri: hyper::Uri = url
        .parse()
        .map_err(|_| "url: not a valid URL once filled in".to_owned())?;
    let method = hyper::Method::from_bytes(http.method.as_bytes())
        .map_err(|_| format!("method {} is not valid", http.method))?;
    let mut headers = Vec::new();
    for (k, v) in &http.headers {
        let value = expand(v, cx, secrets, Escape::None).map_err(|e| format!("header {k}: {e}"))?;
        let name = hyper::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("header name {k} is not valid"))?;
        let value = hyper::header::HeaderValue::from_str(&value)
            .map_err(|_| format!("header {k}: the value is not a valid header value"))?;
        headers.push((name, value));
    }
    let body = match &http.body {
        Some(b) => Some(
            serde_json::to_vec(&expand_json(b, cx, secrets).map_err(|e| format!("body: {e}"))?)
                .unwrap_or_default(),
        ),
        None => None,
    };
    Ok(Prepared {
        uri,
        method,
        headers,
        body,
    })
}

async fn http_once_with(
    http: &HttpHook,
    cx: &HookContext,
    tls_config: fn() -> Result<Arc<rustls::ClientConfig>, String>,
    protected: &super::Protected,
) -> Result<String, String> {
    let secrets = Recording::guarding(protected);
    let p = prepare(http, cx, &secrets)?;
    let https = match p.uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err("url: only http:// and https:// are supported".into()),
    };
    let host = p.uri.host().ok_or("url: no host")?.to_owned();
    let port = p.uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let host_bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let tcp = tokio::net::TcpStream::connect((host_bare.as_str(), port))
        .await
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let authority = p
        .uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    let path = p
        .uri
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let mut req = hyper::Request::builder()
        .method(p.method)
        .uri(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::USER_AGENT, "pxcontroller-hooks");
    if p.body.is_some() {
        req = req.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    for (k, v) in p.headers {
        req = req.header(k, v);
    }
    let req = req
        .body(Full::new(Bytes::from(p.body.unwrap_or_default())))
        .map_err(|e| format!("request: {e}"))?;
    let (status, body) = if https {
        let config = tls_config()?;
        let name = rustls::pki_types::ServerName::try_from(host_bare.clone())
            .map_err(|_| format!("{host} is not a valid TLS server name"))?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake with {host}:{port} failed: {e}"))?;
        exchange(hyper_util::rt::TokioIo::new(tls), req).await?
    } else {
        exchange(hyper_util::rt::TokioIo::new(tcp), req).await?
    };
    let wanted = http.success_contains.as_deref().unwrap_or("");
    let text = String::from_utf8_lossy(&body);
    if status.is_success() && text.contains(wanted) {
        Ok(format!("HTTP {}", status.as_u16()))
    } else if status.is_success() {
        Err(format!(
            "HTTP {} without {wanted:?} in the answer: {}",
            status.as_u16(),
            secrets.scrub(&text)
        ))
    } else {
        let answer = secrets.scrub(&text);
        Err(format!(
            "HTTP {}{}",
            status,
            if answer.is_empty() {
                String::new()
            } else {
                format!(": {answer}")
            }
        ))
    }
}

async fn exchange<T>(
    io: T,
    req: hyper::Request<Full<Bytes>>,
) -> Result<(hyper::StatusCode, Bytes), String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP handshake failed: {e}"))?;
    let conn = tokio::spawn(conn);
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("HTTP request failed: {e}"))?;
    let status = resp.status();
    let body = http_body_util::Limited::new(resp.into_body(), 64 * 1024)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    conn.abort();
    Ok((status, body))
}

/// Client TLS with the system's CA bundle (`SSL_CERT_FILE`, else the Debian path), as the agent's downloads have it
/// ([`pxfleet_tls::public_client_config`]).
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            pxfleet_tls::public_client_config(None)
                .map(Arc::new)
                .map_err(|e| e.to_string())
        })
        .clone()
}

/// Runs the command hook's argv through crates/pve's process runner (argv, no shell; stdin /dev/null; killed with
/// its process group when `timeout` passes or the attempt is dropped; stderr kept for the error, secrets
/// scrubbed).
async fn command_once(
    argv: &[String],
    cx: &HookContext,
    event: HookEvent,
    timeout: Duration,
    protected: &super::Protected,
) -> Result<String, String> {
    use pxfleet_pve::{Command, ProcessRunner, RunError, Runner};
    let secrets = Recording::guarding(protected);
    let args: Vec<String> = argv
        .iter()
        .map(|a| expand(a, cx, &secrets, Escape::None))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let mut cmd = Command::new(args[0].clone())
        .args(args[1..].iter().cloned())
        .timeout(timeout);
    for (k, v) in cx.env(event) {
        cmd = cmd.env(k, v);
    }
    for secret in secrets.seen.borrow().iter() {
        cmd = cmd.redact(secret.clone());
    }
    let out = match ProcessRunner::new().run(cmd).await {
        Ok(out) => out,
        Err(RunError::Spawn { source, .. }) => {
            return Err(format!("cannot run {}: {source}", args[0]))
        }
        Err(e) => return Err(secrets.scrub(&e.to_string())),
    };
    if out.success() {
        Ok("exit status 0".into())
    } else {
        let stderr = secrets.scrub(&out.stderr_str());
        let status = match out.status {
            Some(code) => format!("exit status: {code}"),
            None => "killed by a signal".to_string(),
        };
        Err(format!(
            "{} {status}{}",
            args[0],
            if stderr.is_empty() {
                String::new()
            } else {
                format!(": {stderr}")
            }
        ))
    }
}

#[cfg(test)]
mod tests;
