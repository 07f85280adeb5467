package idemfiber

import (
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

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

// capture returns the handler's response, as the engine stores it, its headers in h (empty).
// Nothing is copied but the header names and values, which are interned: the store copies
// what it keeps before Complete returns, and the engine returns before fasthttp reuses its
// buffers.
func (m *middleware) capture(c *fiber.Ctx, h map[string][]string) idem.Response {
	resp := c.Response()
	out := idem.Response{Status: resp.StatusCode(), Header: h}
	resp.Header.VisitAll(func(k, v []byte) {
		if notStored[string(k)] {
			return
		}
		if vs, ok := h[string(k)]; ok {
			h[string(k)] = append(vs[:len(vs):len(vs)], string(v))
			return
		}
		name, vs := m.interned.lookup(k, v)
		h[name] = vs
	})
	body := resp.Body()
	if len(body) > m.maxBody {
		out.BodyOmitted = true
	} else if len(body) > 0 {
		out.Body = body
	}
	return out
}

// interned keeps the header lines most responses share (Content-Type: application/json), so
// that capturing them does not allocate. It holds at most internMax lines, the first seen.
type interned struct {
	lines atomic.Pointer[[]internedLine]
	mu    sync.Mutex
}

type internedLine struct {
	name  string
	value []string // one value; read-only
}

const internMax = 32

// lookup returns the name and a one-value slice for the header line k: v.
func (in *interned) lookup(k, v []byte) (string, []string) {
	if p := in.lines.Load(); p != nil {
		for _, l := range *p {
			if l.name == string(k) && l.value[0] == string(v) {
				return l.name, l.value
			}
		}
	}
	l := internedLine{name: string(k), value: []string{string(v)}}
	if p := in.lines.Load(); p != nil && len(*p) >= internMax {
		return l.name, l.value // full: a value seen once is not worth the lock
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	old := in.lines.Load()
	if old == nil || len(*old) < internMax {
		var lines []internedLine
		if old != nil {
			lines = append(lines, *old...)
		}
		lines = append(lines, l)
		in.lines.Store(&lines)
	}
	return l.name, l.value
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
		// Stored names are canonical already (fasthttp normalised them); fasthttp copies
		// names and values, so read-only views of the stored strings do.
		for _, v := range vs {
			h.AddBytesKV(bytesOf(k), bytesOf(v))
		}
	}
	h.SetCanonical(replayedName, replayedTrue)
	c.Status(status)
	if resp.BodyOmitted {
		h.SetContentType(idemhttp.ProblemContentType)
		return c.Send(notRetainedBody(status))
	}
	c.Response().SetBodyRaw(resp.Body) // read-only: fasthttp copies before any change
	return nil
}

var (
	replayedName = []byte(idemhttp.ReplayedHeader)
	replayedTrue = []byte("true")
)

// bytesOf returns a read-only view of s, for fasthttp calls that copy it.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

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
	probMissingKey    = newProblem(400, idemhttp.ProblemMissingKey, "This request requires an idempotency key")
	probInvalidKey    = newProblem(400, idemhttp.ProblemInvalidKey, "The idempotency key must be 1 to 255 printable ASCII characters, sent once")
	probInvalidScope  = newProblem(400, idemhttp.ProblemInvalidScope, "The caller could not be identified")
	probScopeSpelling = newProblem(400, idemhttp.ProblemScopeHeaderSpelling, "The scope header was sent with underscores for hyphens; send it under its own name")
	probInFlight      = newProblem(409, idemhttp.ProblemInFlight, "A request with this idempotency key is being processed; retry later")
	probMismatch      = newProblem(422, idemhttp.ProblemMismatch, "This idempotency key was used with a different request")
	probStore         = newProblem(503, idemhttp.ProblemStoreUnavailable, "The request was not processed: the idempotency store is unavailable; retry later")
	probInternal      = newProblem(500, idemhttp.ProblemInternal, "The request was not processed")
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
