package sshserve

import (
	"crypto/rsa"
	"errors"
	"fmt"

	gossh "golang.org/x/crypto/ssh"
)

// The algorithms the server offers: what current OpenSSH (9.x, 10.x)
// offers by default and x/crypto implements, without SHA-1. x/crypto's
// own defaults add diffie-hellman-group14-sha1, hmac-sha1 and
// hmac-sha1-96, ssh-rsa (SHA-1) signatures and ssh-dss keys. OpenSSH
// still offers hmac-sha1 (and its -etm form); the AEAD ciphers every
// current client picks first need no MAC at all.
var (
	keyExchanges = []string{
		gossh.KeyExchangeMLKEM768X25519,
		gossh.KeyExchangeCurve25519, // and its @libssh.org name, which x/crypto adds
		gossh.KeyExchangeECDHP256,
		gossh.KeyExchangeECDHP384,
		gossh.KeyExchangeECDHP521,
		gossh.KeyExchangeDHGEXSHA256,
		gossh.KeyExchangeDH16SHA512,
		gossh.KeyExchangeDH14SHA256,
	}
	ciphers = []string{
		gossh.CipherChaCha20Poly1305,
		gossh.CipherAES128CTR,
		gossh.CipherAES192CTR,
		gossh.CipherAES256CTR,
		gossh.CipherAES128GCM,
		gossh.CipherAES256GCM,
	}
	macs = []string{
		gossh.HMACSHA256ETM,
		gossh.HMACSHA512ETM,
		gossh.HMACSHA256,
		gossh.HMACSHA512,
	}
	// publicKeyAuthAlgorithms are the signatures a client may log in
	// with (OpenSSH's PubkeyAcceptedAlgorithms): no ssh-rsa, no ssh-dss.
	publicKeyAuthAlgorithms = []string{
		gossh.KeyAlgoED25519,
		gossh.KeyAlgoSKED25519,
		gossh.KeyAlgoSKECDSA256,
		gossh.KeyAlgoECDSA256,
		gossh.KeyAlgoECDSA384,
		gossh.KeyAlgoECDSA521,
		gossh.KeyAlgoRSASHA512,
		gossh.KeyAlgoRSASHA256,
	}
	// rsaHostKeyAlgorithms are what an RSA host key signs with.
	rsaHostKeyAlgorithms = []string{gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256}
)

// serverConfig is the SSH library's configuration with these algorithms.
func serverConfig() *gossh.ServerConfig {
	return &gossh.ServerConfig{
		Config:                  gossh.Config{KeyExchanges: keyExchanges, Ciphers: ciphers, MACs: macs},
		PublicKeyAuthAlgorithms: publicKeyAuthAlgorithms,
	}
}

// minRSABits is the smallest RSA key that logs in or serves as the host
// key: what `ctrld operator add-key` refuses below (daemon/operatorkeys),
// and what OpenSSH itself no longer makes.
const minRSABits = 2048

// errWeakKey refuses a key too weak to log in with.
var errWeakKey = errors.New("weak key")

// weakKey says why key is too weak to log in with (or to be the host
// key), nil when it is not: a DSA key (OpenSSH 10 removed them), an RSA
// key under minRSABits. A registered key is refused at login all the same:
// the table may hold one put there by hand, or from before the registry
// refused it.
func weakKey(key gossh.PublicKey) error {
	switch key.Type() {
	case gossh.InsecureKeyAlgoDSA, gossh.InsecureCertAlgoDSAv01:
		return fmt.Errorf("%w: a DSA key", errWeakKey)
	case gossh.KeyAlgoRSA, gossh.CertAlgoRSAv01:
		if cert, ok := key.(*gossh.Certificate); ok {
			key = cert.Key
		}
		ck, ok := key.(gossh.CryptoPublicKey)
		if !ok {
			return fmt.Errorf("%w: an RSA key of unknown size", errWeakKey)
		}
		pub, ok := ck.CryptoPublicKey().(*rsa.PublicKey)
		if !ok {
			return fmt.Errorf("%w: an RSA key of unknown size", errWeakKey)
		}
		if bits := pub.N.BitLen(); bits < minRSABits {
			return fmt.Errorf("%w: an RSA key of %d bits, under %d", errWeakKey, bits, minRSABits)
		}
	}
	return nil
}
