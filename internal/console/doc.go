// Package console is the operator's web console of idem: the records of a store, searchable by
// state, age, client key and tenant; a record's stored response; a confirmed release of a
// stuck key; and, inside a gateway, the rates of requests by outcome.
//
// # Serving
//
// A Console is an http.Handler, served on a listener of its own (`idem serve --console-listen`,
// or `idem console` against a store). Its pages are server-rendered HTML with a little
// JavaScript for the rates chart; every asset is embedded, so it works offline.
//
// # Security
//
// A console never runs without a credential: every request must carry its token (as a bearer
// token, or as the password of basic credentials, which a browser prompts for), compared in
// constant time. A release is a POST from the console's own page with the browser session's
// CSRF token, refused from another origin; it follows the rules of `idem release` (a live
// lease is released only with force) and is logged with who asked. Stored header values that
// may be credentials are never shown, and a body that is not text is shown as hex. Pages carry
// a Content-Security-Policy without inline script, and may not be framed.
package console
