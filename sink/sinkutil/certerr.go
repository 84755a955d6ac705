package sinkutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"reflect"
)

// IsCertificateError reports whether err is a TLS handshake that failed over
// a certificate: the server's did not verify here (unknown authority,
// expired, wrong host name), or the server refused the client's (a TLS alert
// naming the certificate). Either is a condition of the connection's
// configuration, never of a message, so sinks classify it as
// [outbox.Unavailable].
func IsCertificateError(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		invalid          x509.CertificateInvalidError
		hostname         x509.HostnameError
		verification     *tls.CertificateVerificationError
	)
	if errors.As(err, &unknownAuthority) || errors.As(err, &invalid) ||
		errors.As(err, &hostname) || errors.As(err, &verification) {
		return true
	}
	code, ok := tlsAlert(err)
	return ok && certificateAlerts[code]
}

// tlsAlert returns the alert a TLS peer sent. crypto/tls reports one as a
// net.OpError "remote error" wrapping its unexported alert type (a uint8),
// or as the exported tls.AlertError over QUIC.
func tlsAlert(err error) (uint8, bool) {
	var ae tls.AlertError
	if errors.As(err, &ae) {
		return uint8(ae), true
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return 0, false
	}
	v := reflect.ValueOf(op.Err)
	if v.Kind() != reflect.Uint8 || v.Type().PkgPath() != "crypto/tls" {
		return 0, false
	}
	return uint8(v.Uint()), true
}

// certificateAlerts are the TLS alerts (RFC 8446 section 6) a server sends
// when it refuses the client's certificate.
var certificateAlerts = map[uint8]bool{
	42:  true, // bad_certificate
	43:  true, // unsupported_certificate
	44:  true, // certificate_revoked
	45:  true, // certificate_expired
	46:  true, // certificate_unknown
	48:  true, // unknown_ca
	49:  true, // access_denied
	116: true, // certificate_required
}
