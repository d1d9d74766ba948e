//! SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) on the server side, as Kafka's
//! `ScramSaslServer` implements them: the message grammar of Kafka's `ScramMessages` (only the
//! `n` GS2 header, no channel binding checks, extensions parsed and ignored except
//! `tokenauth`), credentials stored as salt + StoredKey + ServerKey + iterations (never the
//! password), at least 4096 iterations, and the same split between failures whose message is
//! shown to the client and failures answered with Kafka's generic message.

use crate::sasl::SaslError;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{KeyInit, Mac};
use regex::Regex;
use std::fmt;
use std::sync::OnceLock;
use subtle::ConstantTimeEq;

/// The two SCRAM mechanisms Kafka supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

/// Kafka's `ScramMechanism.minIterations()` (the same for both).
pub const MIN_ITERATIONS: u32 = 4096;
/// The most iterations Kafka accepts in AlterUserScramCredentials.
pub const MAX_ITERATIONS: u32 = 16384;

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The wire code of `ScramMechanism` in the SCRAM credential APIs (1, 2; 0 is UNKNOWN).
    pub fn code(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.code() == code)
    }

    /// The length of the hash (and so of keys and salted passwords) in bytes.
    pub fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        fn run<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
            match <M as KeyInit>::new_from_slice(key) {
                Ok(mut mac) => {
                    mac.update(data);
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            }
        }
        match self {
            ScramMechanism::Sha256 => run::<hmac::Hmac<sha2::Sha256>>(key, data),
            ScramMechanism::Sha512 => run::<hmac::Hmac<sha2::Sha512>>(key, data),
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        use sha2::Digest;
        match self {
            ScramMechanism::Sha256 => sha2::Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => sha2::Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with this mechanism's HMAC.
    pub fn salted_password(self, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.hash_len()];
        match self {
            ScramMechanism::Sha256 => {
                pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password.as_bytes(), salt, iterations, &mut out)
            }
            ScramMechanism::Sha512 => {
                pbkdf2::pbkdf2_hmac::<sha2::Sha512>(password.as_bytes(), salt, iterations, &mut out)
            }
        }
        out
    }
}

impl fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the broker keeps for one user and mechanism: never the password, nor the salted
/// password.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys stay out of logs.
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// The credential for a salted password (what AlterUserScramCredentials carries).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> ScramCredential {
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
            iterations,
        }
    }

    pub fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> ScramCredential {
        let salted = mechanism.salted_password(password, salt, iterations);
        ScramCredential::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// Whether `password` is this credential's password (SASL/PLAIN against the SCRAM store).
    pub fn verifies(&self, mechanism: ScramMechanism, password: &str) -> bool {
        let c = ScramCredential::from_password(mechanism, password, &self.salt, self.iterations);
        c.stored_key.ct_eq(&self.stored_key).into()
    }
}

/// Kafka's `ScramFormatter.secureRandomString()` form of a nonce: a random number in base 36.
pub fn nonce_from_random(random: u128) -> String {
    let mut n = random;
    let mut digits = Vec::new();
    loop {
        let d = (n % 36) as u8;
        digits.push(if d < 10 { b'0' + d } else { b'a' + d - 10 });
        n /= 36;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    String::from_utf8(digits).unwrap_or_default()
}

// The grammar of Kafka's `ScramMessages` (Java's class intersections are the same in `regex`).
const VALUE: &str = r"[\x01-\x7F&&[^,]]+";
const PRINTABLE: &str = r"[\x21-\x7E&&[^,]]+";
const SASLNAME: &str = r"(?:[\x01-\x7F&&[^=,]]|=2C|=3D)+";
const BASE64: &str = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?";

fn client_first_pattern() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        let extensions = format!("(?:,[A-Za-z]+={VALUE})*");
        #[allow(clippy::unwrap_used)] // a constant pattern, covered by the tests
        Regex::new(&format!(
            "^n,(?:a=(?P<authzid>{SASLNAME}))?,(?:m={VALUE},)?n=(?P<saslname>{SASLNAME}),r=(?P<nonce>{PRINTABLE})(?P<extensions>{extensions})$"
        ))
        .unwrap()
    })
}

fn client_final_pattern() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        #[allow(clippy::unwrap_used)] // a constant pattern, covered by the tests
        Regex::new(&format!(
            "^c=(?P<channel>{BASE64}),r=(?P<nonce>{PRINTABLE})(?:,[A-Za-z]+={VALUE})*,p=(?P<proof>{BASE64})$"
        ))
        .unwrap()
    })
}

/// The parsed client-first message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientFirst {
    pub authorization_id: String,
    pub sasl_name: String,
    pub nonce: String,
    /// Extensions in the order sent (a repeated key keeps its first position, last value).
    pub extensions: Vec<(String, String)>,
}

impl ClientFirst {
    pub fn parse(bytes: &[u8]) -> Result<ClientFirst, SaslError> {
        let message = String::from_utf8_lossy(bytes);
        let caps = client_first_pattern().captures(&message).ok_or_else(|| {
            SaslError::Credentials(format!(
                "Invalid SCRAM client first message format: {message}"
            ))
        })?;
        let group = |n: &str| caps.name(n).map_or("", |m| m.as_str()).to_string();
        let mut extensions: Vec<(String, String)> = Vec::new();
        let ext = group("extensions");
        for item in ext.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = item.split_once('=').unwrap_or((item, ""));
            match extensions.iter_mut().find(|(key, _)| key == k) {
                Some(e) => e.1 = v.to_string(),
                None => extensions.push((k.to_string(), v.to_string())),
            }
        }
        Ok(ClientFirst {
            authorization_id: group("authzid"),
            sasl_name: group("saslname"),
            nonce: group("nonce"),
            extensions,
        })
    }

    /// `client-first-message-bare` as Kafka rebuilds it for the AuthMessage.
    pub fn bare(&self) -> String {
        let mut s = format!("n={},r={}", self.sasl_name, self.nonce);
        for (k, v) in &self.extensions {
            s.push(',');
            s.push_str(k);
            s.push('=');
            s.push_str(v);
        }
        s
    }

    /// `tokenauth=true` (Java's `Boolean.parseBoolean`): the client authenticates with a
    /// delegation token.
    pub fn token_authenticated(&self) -> bool {
        self.extensions
            .iter()
            .any(|(k, v)| k == "tokenauth" && v.eq_ignore_ascii_case("true"))
    }
}

/// `saslname` -> user name (`=2C` is `,`, `=3D` is `=`).
pub fn username_from_sasl_name(sasl_name: &str) -> Result<String, SaslError> {
    let u = sasl_name.replace("=2C", ",");
    if u.replace("=3D", "").contains('=') {
        return Err(SaslError::Credentials(format!(
            "Invalid username: {sasl_name}"
        )));
    }
    Ok(u.replace("=3D", "="))
}

/// user name -> `saslname`.
pub fn sasl_name_from_username(username: &str) -> String {
    username.replace('=', "=3D").replace(',', "=2C")
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ClientFinal {
    channel_binding: Vec<u8>,
    nonce: String,
    proof: Vec<u8>,
}

impl ClientFinal {
    fn parse(bytes: &[u8]) -> Result<ClientFinal, SaslError> {
        let message = String::from_utf8_lossy(bytes);
        let caps = client_final_pattern().captures(&message).ok_or_else(|| {
            SaslError::Credentials(format!(
                "Invalid SCRAM client final message format: {message}"
            ))
        })?;
        let group = |n: &str| caps.name(n).map_or("", |m| m.as_str());
        let decode = |s: &str| {
            B64.decode(s)
                .map_err(|e| SaslError::Credentials(format!("invalid base64: {e}")))
        };
        Ok(ClientFinal {
            channel_binding: decode(group("channel"))?,
            nonce: group("nonce").to_string(),
            proof: decode(group("proof"))?,
        })
    }

    /// `client-final-message-without-proof` as Kafka rebuilds it (extensions dropped).
    fn without_proof(&self) -> String {
        format!("c={},r={}", B64.encode(&self.channel_binding), self.nonce)
    }
}

/// Where the SCRAM server finds credentials.
pub trait ScramCredentials {
    fn scram_credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;
}

/// What the server keeps between its first and final message.
#[derive(Debug)]
struct Pending {
    first: ClientFirst,
    server_first: String,
    nonce: String,
    credential: ScramCredential,
    username: String,
}

#[derive(Debug)]
enum State {
    ClientFirst,
    ClientFinal(Box<Pending>),
    Complete { username: String },
    Failed,
}

/// One SCRAM exchange on the server side: client-first -> server-first, client-final ->
/// server-final. Sans-IO: the caller supplies the server nonce and the credential lookup.
#[derive(Debug)]
pub struct ScramServer {
    mechanism: ScramMechanism,
    state: State,
}

impl ScramServer {
    pub fn new(mechanism: ScramMechanism) -> ScramServer {
        ScramServer {
            mechanism,
            state: State::ClientFirst,
        }
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// The authenticated user once the exchange is complete.
    pub fn authorization_id(&self) -> Option<&str> {
        match &self.state {
            State::Complete { username } => Some(username),
            _ => None,
        }
    }

    pub fn is_complete(&self) -> bool {
        matches!(self.state, State::Complete { .. })
    }

    /// Evaluates the client's next message. Any error leaves the exchange failed.
    pub fn evaluate(
        &mut self,
        message: &[u8],
        server_nonce: &str,
        credentials: &dyn ScramCredentials,
    ) -> Result<Vec<u8>, SaslError> {
        let state = std::mem::replace(&mut self.state, State::Failed);
        let (next, reply) = match state {
            State::ClientFirst => self.client_first(message, server_nonce, credentials)?,
            State::ClientFinal(pending) => {
                let Pending {
                    first,
                    server_first,
                    nonce,
                    credential,
                    username,
                } = *pending;
                let final_msg = ClientFinal::parse(message)?;
                // Kafka checks only that the final nonce ends with the combined nonce
                // (`endsWith`), and librdkafka 2.0 relies on it: it sends its own nonce
                // again in front of the combined one. The proof covers what was sent.
                if !final_msg.nonce.ends_with(&nonce) {
                    return Err(SaslError::Credentials(
                        "Invalid client nonce in the final client message.".into(),
                    ));
                }
                let auth_message = format!(
                    "{},{},{}",
                    first.bare(),
                    server_first,
                    final_msg.without_proof()
                );
                let client_signature = self
                    .mechanism
                    .hmac(&credential.stored_key, auth_message.as_bytes());
                if final_msg.proof.len() != client_signature.len() {
                    // Kafka's xor throws IllegalArgumentException here, which is not an
                    // authentication failure: the connection is closed without an answer.
                    return Err(SaslError::Malformed(
                        "client proof has the wrong length".into(),
                    ));
                }
                let client_key: Vec<u8> = client_signature
                    .iter()
                    .zip(&final_msg.proof)
                    .map(|(a, b)| a ^ b)
                    .collect();
                let computed = self.mechanism.hash(&client_key);
                if !bool::from(computed.ct_eq(&credential.stored_key)) {
                    return Err(SaslError::Credentials("Invalid client credentials".into()));
                }
                let server_signature = self
                    .mechanism
                    .hmac(&credential.server_key, auth_message.as_bytes());
                (
                    State::Complete { username },
                    format!("v={}", B64.encode(server_signature)).into_bytes(),
                )
            }
            State::Complete { .. } | State::Failed => {
                return Err(SaslError::IllegalState(
                    "Unexpected challenge in Sasl server state".into(),
                ))
            }
        };
        self.state = next;
        Ok(reply)
    }

    fn client_first(
        &self,
        message: &[u8],
        server_nonce: &str,
        credentials: &dyn ScramCredentials,
    ) -> Result<(State, Vec<u8>), SaslError> {
        let first = ClientFirst::parse(message)?;
        let username = username_from_sasl_name(&first.sasl_name)?;
        if first.token_authenticated() {
            // Delegation tokens are not supported: no token owner is ever found.
            return Err(SaslError::Credentials(format!(
                "Token Authentication failed: Invalid tokenId : {username}"
            )));
        }
        let credential = credentials
            .scram_credential(&username, self.mechanism)
            .ok_or_else(|| {
                SaslError::Credentials("Authentication failed: Invalid user credentials".into())
            })?;
        if !first.authorization_id.is_empty() && first.authorization_id != username {
            return Err(SaslError::Authentication(
                "Authentication failed: Client requested an authorization id that is different from username".into(),
            ));
        }
        if credential.iterations < MIN_ITERATIONS {
            return Err(SaslError::Credentials(format!(
                "Iterations {} is less than the minimum {} for {}",
                credential.iterations, MIN_ITERATIONS, self.mechanism
            )));
        }
        let nonce = format!("{}{}", first.nonce, server_nonce);
        let server_first = format!(
            "r={},s={},i={}",
            nonce,
            B64.encode(&credential.salt),
            credential.iterations
        );
        let reply = server_first.clone().into_bytes();
        Ok((
            State::ClientFinal(Box::new(Pending {
                first,
                server_first,
                nonce,
                credential,
                username,
            })),
            reply,
        ))
    }
}

/// The client side of one SCRAM exchange, for Moldau's own client and for tests.
#[derive(Debug)]
pub struct ScramClient {
    mechanism: ScramMechanism,
    username: String,
    password: String,
    client_nonce: String,
    client_first_bare: String,
    expected_server_signature: Option<Vec<u8>>,
}

impl ScramClient {
    pub fn new(
        mechanism: ScramMechanism,
        username: &str,
        password: &str,
        client_nonce: &str,
    ) -> ScramClient {
        ScramClient {
            mechanism,
            username: username.to_string(),
            password: password.to_string(),
            client_nonce: client_nonce.to_string(),
            client_first_bare: String::new(),
            expected_server_signature: None,
        }
    }

    /// The client-first message (`n,,n=user,r=nonce`).
    pub fn client_first(&mut self) -> Vec<u8> {
        self.client_first_bare = format!(
            "n={},r={}",
            sasl_name_from_username(&self.username),
            self.client_nonce
        );
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// The client-final message for the server-first message.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, SaslError> {
        let text = std::str::from_utf8(server_first)
            .map_err(|_| SaslError::Credentials("server-first is not UTF-8".into()))?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for part in text.split(',') {
            if let Some(v) = part.strip_prefix("r=") {
                nonce = Some(v.to_string());
            } else if let Some(v) = part.strip_prefix("s=") {
                salt = B64.decode(v).ok();
            } else if let Some(v) = part.strip_prefix("i=") {
                iterations = v.parse::<u32>().ok();
            } else if let Some(e) = part.strip_prefix("e=") {
                return Err(SaslError::Authentication(e.to_string()));
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(SaslError::Credentials(format!(
                "invalid server-first message: {text}"
            )));
        };
        if !nonce.starts_with(&self.client_nonce) || iterations == 0 {
            return Err(SaslError::Credentials(
                "server nonce does not extend the client nonce".into(),
            ));
        }
        let salted = self
            .mechanism
            .salted_password(&self.password, &salt, iterations);
        let client_key = self.mechanism.hmac(&salted, b"Client Key");
        let stored_key = self.mechanism.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{},{}", self.client_first_bare, text, without_proof);
        let signature = self.mechanism.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = self.mechanism.hmac(&salted, b"Server Key");
        self.expected_server_signature =
            Some(self.mechanism.hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message (the server proves it knows the credential too).
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), SaslError> {
        let text = String::from_utf8_lossy(server_final);
        if let Some(e) = text.strip_prefix("e=") {
            return Err(SaslError::Authentication(e.to_string()));
        }
        let sig = text
            .strip_prefix("v=")
            .and_then(|v| B64.decode(v.split(',').next().unwrap_or("")).ok());
        match (&self.expected_server_signature, sig) {
            (Some(expected), Some(sig)) if bool::from(expected.ct_eq(&sig)) => Ok(()),
            _ => Err(SaslError::Credentials(
                "invalid server signature in the server final message".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::HashMap;

    struct Store(HashMap<(String, ScramMechanism), ScramCredential>);
    impl ScramCredentials for Store {
        fn scram_credential(&self, user: &str, m: ScramMechanism) -> Option<ScramCredential> {
            self.0.get(&(user.to_string(), m)).cloned()
        }
    }

    /// RFC 7677 section 3: the SCRAM-SHA-256 example exchange, byte for byte.
    #[test]
    fn rfc7677_example() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let cred = ScramCredential::from_password(ScramMechanism::Sha256, "pencil", &salt, 4096);
        let store = Store(HashMap::from([(
            ("user".to_string(), ScramMechanism::Sha256),
            cred,
        )]));
        let mut server = ScramServer::new(ScramMechanism::Sha256);
        let first = server
            .evaluate(
                b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
                "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
                &store,
            )
            .unwrap();
        assert_eq!(
            String::from_utf8(first).unwrap(),
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let last = server
            .evaluate(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                "unused",
                &store,
            )
            .unwrap();
        assert_eq!(
            String::from_utf8(last).unwrap(),
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        assert_eq!(server.authorization_id(), Some("user"));
    }

    /// RFC 7677's client side reproduces the example's proof.
    #[test]
    fn rfc7677_client() {
        let mut c = ScramClient::new(
            ScramMechanism::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO",
        );
        assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let fin = c
            .client_final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .unwrap();
        assert_eq!(
            String::from_utf8(fin).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(c.verify_server_final(b"v=AAAA").is_err());
    }

    fn store_with(user: &str, password: &str, iterations: u32) -> Store {
        let mut m = HashMap::new();
        for mech in ScramMechanism::ALL {
            m.insert(
                (user.to_string(), mech),
                ScramCredential::from_password(mech, password, b"salt-bytes", iterations),
            );
        }
        Store(m)
    }

    fn exchange(
        mech: ScramMechanism,
        store: &Store,
        user: &str,
        password: &str,
    ) -> Result<String, SaslError> {
        let mut client = ScramClient::new(mech, user, password, "clientnonce");
        let mut server = ScramServer::new(mech);
        let sf = server.evaluate(&client.client_first(), "servernonce", store)?;
        let cf = client.client_final(&sf)?;
        let fin = server.evaluate(&cf, "x", store)?;
        client.verify_server_final(&fin)?;
        Ok(server.authorization_id().unwrap().to_string())
    }

    /// librdkafka 2.0's client-final repeats the client nonce before the combined one; Kafka
    /// accepts any final nonce that ends with the combined nonce, so Moldau does too.
    #[test]
    fn final_nonce_only_has_to_end_with_the_combined_one() {
        let store = store_with("alice", "secret", 4096);
        let m = ScramMechanism::Sha256;
        let mut s = ScramServer::new(m);
        let sf = s.evaluate(b"n,,n=alice,r=cn", "sn", &store).unwrap();
        let sf = String::from_utf8(sf).unwrap();
        let without_proof = "c=biws,r=cncnsn";
        let auth_message = format!("n=alice,r=cn,{sf},{without_proof}");
        let salted = m.salted_password("secret", b"salt-bytes", 4096);
        let client_key = m.hmac(&salted, b"Client Key");
        let signature = m.hmac(&m.hash(&client_key), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let fin = format!("{without_proof},p={}", B64.encode(proof));
        assert!(s.evaluate(fin.as_bytes(), "x", &store).is_ok());
        assert_eq!(s.authorization_id(), Some("alice"));
        let mut s = ScramServer::new(m);
        s.evaluate(b"n,,n=alice,r=cn", "sn", &store).unwrap();
        assert_eq!(
            s.evaluate(b"c=biws,r=cnsnX,p=AAAA", "x", &store),
            Err(SaslError::Credentials(
                "Invalid client nonce in the final client message.".into()
            ))
        );
    }

    #[test]
    fn both_mechanisms_round_trip_and_reject_wrong_passwords() {
        let store = store_with("alice,=x", "secret", 4096);
        for mech in ScramMechanism::ALL {
            assert_eq!(
                exchange(mech, &store, "alice,=x", "secret").unwrap(),
                "alice,=x"
            );
            assert_eq!(
                exchange(mech, &store, "alice,=x", "wrong"),
                Err(SaslError::Credentials("Invalid client credentials".into()))
            );
            assert_eq!(
                exchange(mech, &store, "bob", "secret"),
                Err(SaslError::Credentials(
                    "Authentication failed: Invalid user credentials".into()
                ))
            );
        }
    }

    #[test]
    fn kafka_rules_for_the_first_message() {
        let store = store_with("alice", "secret", 4096);
        let mut s = ScramServer::new(ScramMechanism::Sha256);
        // A different authorization id is refused with a message the client sees.
        assert!(matches!(
            s.evaluate(b"n,a=bob,n=alice,r=abc", "n", &store),
            Err(SaslError::Authentication(_))
        ));
        // The same authorization id is fine.
        let mut s = ScramServer::new(ScramMechanism::Sha256);
        assert!(s.evaluate(b"n,a=alice,n=alice,r=abc", "n", &store).is_ok());
        // Channel binding flags other than `n` do not parse.
        let mut s = ScramServer::new(ScramMechanism::Sha256);
        assert!(matches!(
            s.evaluate(b"y,,n=alice,r=abc", "n", &store),
            Err(SaslError::Credentials(_))
        ));
        // tokenauth=true asks for a delegation token, which never exists here.
        let mut s = ScramServer::new(ScramMechanism::Sha256);
        assert_eq!(
            s.evaluate(b"n,,n=alice,r=abc,tokenauth=true", "n", &store),
            Err(SaslError::Credentials(
                "Token Authentication failed: Invalid tokenId : alice".into()
            ))
        );
        // Other extensions are ignored but kept in the AuthMessage.
        let mut s = ScramServer::new(ScramMechanism::Sha256);
        assert!(s.evaluate(b"n,,n=alice,r=abc,foo=bar", "n", &store).is_ok());
        // Fewer iterations than Kafka's minimum are refused.
        let weak = store_with("alice", "secret", 1000);
        let mut s = ScramServer::new(ScramMechanism::Sha512);
        assert!(matches!(
            s.evaluate(b"n,,n=alice,r=abc", "n", &weak),
            Err(SaslError::Credentials(m)) if m.contains("less than the minimum 4096")
        ));
        // Non-ASCII and bad escapes in names do not parse.
        let mut s = ScramServer::new(ScramMechanism::Sha256);
        assert!(s.evaluate("n,,n=é,r=abc".as_bytes(), "n", &store).is_err());
        let mut s = ScramServer::new(ScramMechanism::Sha256);
        assert!(s.evaluate(b"n,,n=a=2X,r=abc", "n", &store).is_err());
    }

    #[test]
    fn final_message_checks() {
        let store = store_with("alice", "secret", 4096);
        let mut s = ScramServer::new(ScramMechanism::Sha256);
        s.evaluate(b"n,,n=alice,r=abc", "SRV", &store).unwrap();
        assert_eq!(
            s.evaluate(b"c=biws,r=abcXXX,p=AAAA", "", &store),
            Err(SaslError::Credentials(
                "Invalid client nonce in the final client message.".into()
            ))
        );
        // After a failure the exchange stays failed.
        assert!(matches!(
            s.evaluate(b"c=biws,r=abcSRV,p=AAAA", "", &store),
            Err(SaslError::IllegalState(_))
        ));
        let mut s = ScramServer::new(ScramMechanism::Sha256);
        s.evaluate(b"n,,n=alice,r=abc", "SRV", &store).unwrap();
        assert!(matches!(
            s.evaluate(b"c=biws,r=abcSRV,p=AAAA", "", &store),
            Err(SaslError::Malformed(_))
        ));
    }

    #[test]
    fn nonce_is_base36() {
        assert_eq!(nonce_from_random(0), "0");
        assert_eq!(nonce_from_random(35), "z");
        assert_eq!(nonce_from_random(36), "10");
        assert!(nonce_from_random(u128::MAX)
            .chars()
            .all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn plain_against_the_scram_store() {
        let c = ScramCredential::from_password(ScramMechanism::Sha512, "pw", b"s", 4096);
        assert!(c.verifies(ScramMechanism::Sha512, "pw"));
        assert!(!c.verifies(ScramMechanism::Sha512, "pW"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Any bytes as a first or final message: an error or a reply, never a panic.
        #[test]
        fn arbitrary_messages_never_panic(a in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
                                          b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let store = store_with("alice", "secret", 4096);
            let mut s = ScramServer::new(ScramMechanism::Sha256);
            let _ = s.evaluate(&a, "n", &store);
            let _ = s.evaluate(&b, "n", &store);
        }

        /// User names with the characters SCRAM escapes round-trip.
        #[test]
        fn sasl_names_round_trip(name in "[ -~]{1,20}") {
            let sasl = sasl_name_from_username(&name);
            proptest::prop_assert_eq!(username_from_sasl_name(&sasl).unwrap(), name);
        }
    }
}
