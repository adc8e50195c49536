"""The TLS context a parsed URI asks for (:func:`tls_context`): ``tlsCAFile``,
``tlsCertificateKeyFile`` (and its password), ``tlsAllowInvalidCertificates``,
``tlsAllowInvalidHostnames``, ``tlsInsecure``. Standard library only.

Python's ``ssl`` checks neither OCSP nor revocation lists by default, so
``tlsDisableOCSPEndpointCheck`` and ``tlsDisableCertificateRevocationCheck`` ask for what is
already so.
"""

from __future__ import annotations

import ssl

from .uri import MongoURI

__all__ = ["tls_context"]


def tls_context(uri: MongoURI) -> ssl.SSLContext | None:
    """The client context for ``uri``'s TLS options; None when the URI asks for no TLS. A file
    that cannot be read raises ``ValueError`` naming the option (never the password)."""
    if not uri.tls:
        return None
    options = uri.options
    cafile = options.get("tlsCAFile")
    try:
        context = ssl.create_default_context(cafile=cafile)
    except OSError as exc:  # (ssl.SSLError too)
        raise ValueError(f"tlsCAFile={cafile!r}: {exc.strerror or type(exc).__name__}") from None
    certificate = options.get("tlsCertificateKeyFile")
    if certificate:
        try:
            context.load_cert_chain(
                certificate, password=options.get("tlsCertificateKeyFilePassword")
            )
        except OSError as exc:  # (ssl.SSLError too; the message never holds the password)
            reason = exc.strerror or type(exc).__name__
            raise ValueError(f"tlsCertificateKeyFile={certificate!r}: {reason}") from None
    if options.get("tlsInsecure") or options.get("tlsAllowInvalidCertificates"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif options.get("tlsAllowInvalidHostnames"):
        context.check_hostname = False
    return context
