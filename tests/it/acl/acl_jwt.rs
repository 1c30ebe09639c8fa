//! The `jwt` auth method against keys made by a real tool: openssl generates RSA and EC key
//! pairs, its PEM public keys configure the method, tokens are signed with the private keys
//! (RS256, PS256, ES256), and `praetor::store::acl::jwt::verify` must accept exactly the
//! tokens of configured keys.

use base64::Engine as _;
use praetor::store::acl::jwt::{verify, JwtConfig};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, RsaKeyPair};
use std::path::Path;
use std::process::Command;

const NOW: i64 = 1_700_000_000;

fn openssl(args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .status()
        .expect("openssl runs (tests/run.sh installs it)");
    assert!(status.success(), "openssl {args:?}");
}

/// Generates a key with openssl: `(PKCS#8 DER private key, PEM SPKI public key)`.
fn generate(dir: &Path, name: &str, algorithm: &[&str]) -> (Vec<u8>, String) {
    let private_pem = dir.join(format!("{name}.pem"));
    let private_der = dir.join(format!("{name}.der"));
    let public_pem = dir.join(format!("{name}.pub.pem"));
    let mut args = vec!["genpkey"];
    args.extend_from_slice(algorithm);
    args.extend_from_slice(&["-out", private_pem.to_str().unwrap()]);
    openssl(&args);
    openssl(&[
        "pkcs8",
        "-topk8",
        "-nocrypt",
        "-in",
        private_pem.to_str().unwrap(),
        "-outform",
        "DER",
        "-out",
        private_der.to_str().unwrap(),
    ]);
    openssl(&[
        "pkey",
        "-in",
        private_pem.to_str().unwrap(),
        "-pubout",
        "-out",
        public_pem.to_str().unwrap(),
    ]);
    (
        std::fs::read(private_der).unwrap(),
        std::fs::read_to_string(public_pem).unwrap(),
    )
}

fn encode(alg: &str, claims: &serde_json::Value) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(serde_json::json!({"alg": alg, "typ": "JWT"}).to_string());
    let payload = b64.encode(claims.to_string());
    format!("{header}.{payload}")
}

fn sign_rsa(
    der: &[u8],
    alg: &str,
    padding: &'static dyn signature::RsaEncoding,
    claims: &serde_json::Value,
) -> String {
    let pair = RsaKeyPair::from_pkcs8(der).unwrap();
    let message = encode(alg, claims);
    let mut sig = vec![0; pair.public().modulus_len()];
    pair.sign(padding, &SystemRandom::new(), message.as_bytes(), &mut sig)
        .unwrap();
    format!(
        "{message}.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig)
    )
}

fn sign_es256(der: &[u8], claims: &serde_json::Value) -> String {
    let rng = SystemRandom::new();
    let pair =
        EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng).unwrap();
    let message = encode("ES256", claims);
    let sig = pair.sign(&rng, message.as_bytes()).unwrap();
    format!(
        "{message}.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig.as_ref())
    )
}

#[test]
fn openssl_keys_verify_rs256_ps256_and_es256() {
    let dir = std::env::temp_dir().join(format!("praetor-acl-jwt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (rsa_der, rsa_pem) = generate(
        &dir,
        "rsa",
        &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
    );
    let (ec_der, ec_pem) = generate(
        &dir,
        "ec",
        &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
    );
    let (other_der, _) = generate(
        &dir,
        "other",
        &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
    );
    std::fs::remove_dir_all(&dir).unwrap();

    let config = JwtConfig::from_json(
        &serde_json::json!({
            "JWTValidationPubKeys": [rsa_pem, ec_pem],
            "BoundIssuer": "https://ci.example",
            "BoundAudiences": ["praetor"],
            "ClaimMappings": {"sub": "name"},
        })
        .to_string(),
    )
    .unwrap();
    assert_eq!(config.public_keys.len(), 2);
    let claims = serde_json::json!({
        "iss": "https://ci.example", "aud": "praetor", "sub": "deployer",
        "iat": NOW, "exp": NOW + 300,
    });
    for token in [
        sign_rsa(&rsa_der, "RS256", &signature::RSA_PKCS1_SHA256, &claims),
        sign_rsa(&rsa_der, "RS512", &signature::RSA_PKCS1_SHA512, &claims),
        sign_rsa(&rsa_der, "PS256", &signature::RSA_PSS_SHA256, &claims),
        sign_es256(&ec_der, &claims),
    ] {
        let identity = verify(&config, &token, NOW).unwrap();
        assert_eq!(identity.values["name"], "deployer");
    }
    // A key the method does not list, or a token past its expiry, is refused.
    let foreign = sign_rsa(&other_der, "RS256", &signature::RSA_PKCS1_SHA256, &claims);
    assert_eq!(
        verify(&config, &foreign, NOW).unwrap_err(),
        "no known key successfully validated the token signature"
    );
    let valid = sign_es256(&ec_der, &claims);
    assert!(verify(&config, &valid, NOW + 400)
        .unwrap_err()
        .contains("token is expired"));
    // The RSA key must not verify an ES256-labelled token and vice versa.
    let mislabeled = {
        let mut parts: Vec<String> = valid.split('.').map(String::from).collect();
        parts[0] = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::json!({"alg": "RS256"}).to_string());
        parts.join(".")
    };
    assert!(verify(&config, &mislabeled, NOW).is_err());
}
