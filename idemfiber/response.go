package idemfiber

import (
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// notStored are the response headers never stored: hop-by-hop ones, those fasthttp writes
// itself (Content-Length, Date, Server) and Set-Cookie.
var notStored = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true, "Date": true, "Server": true, "Set-Cookie": true,
}

// capture returns the handler's response, as the engine stores it. Status, header and body
// are copied: fasthttp reuses its buffers once the request is done.
func (m *middleware) capture(c *fiber.Ctx) idem.Response {
	resp := c.Response()
	out := idem.Response{Status: resp.StatusCode()}
	h := make(map[string][]string, 2)
	resp.Header.VisitAll(func(k, v []byte) {
		if ks := string(k); !notStored[ks] {
			h[ks] = append(h[ks], string(v))
		}
	})
	out.Header = h
	body := resp.Body()
	if len(body) > m.maxBody {
		out.BodyOmitted = true
	} else if len(body) > 0 {
		out.Body = body // the store copies what it keeps before Complete returns
	}
	return out
}

// replay writes a stored response with Idempotent-Replayed: true.
func replay(c *fiber.Ctx, resp *idem.Response) error {
	status := resp.Status
	if status == 0 {
		status = fiber.StatusOK
	}
	h := &c.Response().Header
	for k, vs := range resp.Header {
		if resp.BodyOmitted && k == fiber.HeaderContentType {
			continue
		}
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	h.Set(idemhttp.ReplayedHeader, "true")
	c.Status(status)
	if resp.BodyOmitted {
		h.SetContentType(idemhttp.ProblemContentType)
		return c.Send(notRetainedBody(status))
	}
	c.Response().SetBodyRaw(resp.Body) // read-only: fasthttp copies before any change
	return nil
}

// notRetainedBody is the body of a replay whose response was not kept.
func notRetainedBody(status int) []byte {
	return []byte(`{"type":"` + idemhttp.ProblemNotRetained + `","title":"This request was already processed; its response was too large to be retained","status":` +
		strconv.Itoa(status) + "}\n")
}

// problem is one precomputed problem+json answer, as idemhttp writes it.
type problem struct {
	status int
	body   []byte
}

func newProblem(status int, typ, title string) *problem {
	return &problem{status: status, body: []byte(`{"type":"` + typ + `","title":"` + title + `","status":` + strconv.Itoa(status) + "}\n")}
}

var (
	probMissingKey   = newProblem(400, idemhttp.ProblemMissingKey, "This request requires an idempotency key")
	probInvalidKey   = newProblem(400, idemhttp.ProblemInvalidKey, "The idempotency key must be 1 to 255 printable ASCII characters, sent once")
	probInvalidScope = newProblem(400, idemhttp.ProblemInvalidScope, "The caller could not be identified")
	probInFlight     = newProblem(409, idemhttp.ProblemInFlight, "A request with this idempotency key is being processed; retry later")
	probMismatch     = newProblem(422, idemhttp.ProblemMismatch, "This idempotency key was used with a different request")
	probStore        = newProblem(503, idemhttp.ProblemStoreUnavailable, "The request was not processed: the idempotency store is unavailable; retry later")
	probInternal     = newProblem(500, idemhttp.ProblemInternal, "The request was not processed")
)

// write answers the problem, with Retry-After if retryAfter is not empty.
func (p *problem) write(c *fiber.Ctx, retryAfter string) error {
	h := &c.Response().Header
	h.SetContentType(idemhttp.ProblemContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	if retryAfter != "" {
		h.Set(fiber.HeaderRetryAfter, retryAfter)
	}
	c.Status(p.status)
	return c.Send(p.body)
}
