//! Certificates made for one run: a CA and a serving certificate it signs, so that the sim
//! (`kcache sim`) and the benchmark's kcache and nginx can serve HTTPS that clients verify
//! like a real cluster's, without any file from outside the run.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// A CA and a serving certificate it signed, in PEM and DER.
pub struct ServingCert {
    /// The CA certificate, for clients' trust roots (a kubeconfig's
    /// `certificate-authority-data`).
    pub ca_pem: String,
    pub ca_der: Vec<u8>,
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: Vec<u8>,
    /// PKCS#8.
    pub key_der: Vec<u8>,
}

impl ServingCert {
    /// A new CA (common name `{label}-ca`) and a certificate it signs for `names` (DNS names
    /// or IP addresses).
    pub fn new(label: &str, names: &[String]) -> Result<ServingCert, rcgen::Error> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{label}-ca"));
        let ca = ca_params.self_signed(&ca_key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names.to_vec())?;
        params.distinguished_name.push(DnType::CommonName, label);
        let leaf = params.signed_by(&key, &ca, &ca_key)?;
        Ok(ServingCert {
            ca_pem: ca.pem(),
            ca_der: ca.der().to_vec(),
            cert_pem: leaf.pem(),
            key_pem: key.serialize_pem(),
            cert_der: leaf.der().to_vec(),
            key_der: key.serialize_der(),
        })
    }
}
