package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"syscall"
	"time"
)

// RawHTTPConn is one HTTP/1.1 keep-alive connection that POSTs prebuilt
// bodies and reads the answers with a single write and as few reads as
// the answer needs: a load generator sharing two cores with the router
// must spend little per request (net/http's client hands every request to
// two more goroutines). It understands what an HTTP server may answer:
// Content-Length, chunked bodies, bodies delimited by close, and
// "Connection: close". Not safe for concurrent use.
type RawHTTPConn struct {
	addr, host string
	timeout    time.Duration
	conn       net.Conn
	br         *bufio.Reader
	wbuf       []byte
	used       bool   // the connection already carried an answer
	auth       string // Authorization header value, if any

	// Body is the last answer's body; it is overwritten by the next Post.
	Body []byte
}

// ErrHTTPTimeout is returned (wrapped) when an answer did not arrive in
// time.
var ErrHTTPTimeout = errors.New("timeout")

// NewRawHTTPConn targets base, an http:// URL without a path.
func NewRawHTTPConn(base string, timeout time.Duration) (*RawHTTPConn, error) {
	u, err := ParseTargetURL(base)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("request timeout must be positive, got %v", timeout)
	}
	return &RawHTTPConn{addr: u.Host, host: u.Host, timeout: timeout}, nil
}

// ParseTargetURL checks that s is an http:// base URL with a host and
// no path; a missing port means 80.
func ParseTargetURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("target URL %q: want http://host:port (%w)", s, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("target URL %q: want http://host:port (https is not supported)", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("target URL %q: no host", s)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return nil, fmt.Errorf("target URL %q: give the base URL only (no path or query)", s)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "80")
	}
	u.Path = ""
	return u, nil
}

// SetBearer sends "Authorization: Bearer token" with every request ("" =
// no header).
func (c *RawHTTPConn) SetBearer(token string) {
	c.auth = ""
	if token != "" {
		c.auth = "Bearer " + token
	}
}

// Close closes the connection.
func (c *RawHTTPConn) Close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// Post sends body to path and reads the answer into c.Body. A connection
// the server closed while idle is redialled once. Errors close the
// connection; a late answer returns an error wrapping ErrHTTPTimeout.
func (c *RawHTTPConn) Post(ctx context.Context, path string, body []byte) (int, error) {
	status, retry, err := c.post(ctx, path, body)
	if retry {
		status, _, err = c.post(ctx, path, body)
	}
	return status, err
}

func (c *RawHTTPConn) post(ctx context.Context, path string, body []byte) (status int, retry bool, err error) {
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if c.conn == nil {
		d := net.Dialer{Deadline: deadline}
		conn, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return 0, false, c.fail(fmt.Errorf("dial %s: %w", c.addr, err))
		}
		c.conn, c.used = conn, false
		if c.br == nil {
			c.br = bufio.NewReaderSize(conn, 16<<10)
		} else {
			c.br.Reset(conn)
		}
	}
	reused := c.used
	if err := c.conn.SetDeadline(deadline); err != nil {
		return 0, false, c.fail(err)
	}
	c.wbuf = append(c.wbuf[:0], "POST "...)
	c.wbuf = append(c.wbuf, path...)
	c.wbuf = append(c.wbuf, " HTTP/1.1\r\nHost: "...)
	c.wbuf = append(c.wbuf, c.host...)
	if c.auth != "" {
		c.wbuf = append(c.wbuf, "\r\nAuthorization: "...)
		c.wbuf = append(c.wbuf, c.auth...)
	}
	c.wbuf = append(c.wbuf, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	c.wbuf = strconv.AppendInt(c.wbuf, int64(len(body)), 10)
	c.wbuf = append(c.wbuf, "\r\n\r\n"...)
	c.wbuf = append(c.wbuf, body...)
	if _, err := c.conn.Write(c.wbuf); err != nil {
		return 0, reused && staleConn(err), c.fail(fmt.Errorf("POST %s: %w", path, err))
	}
	status, err = c.readResponse()
	if err != nil {
		// Nothing of an answer arrived on a kept-alive connection: the
		// server closed it while it was idle, before reading the request.
		return 0, reused && status == 0 && staleConn(err), c.fail(fmt.Errorf("POST %s: %w", path, err))
	}
	c.used = true
	return status, false, nil
}

func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (c *RawHTTPConn) fail(err error) error {
	c.Close()
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrHTTPTimeout, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %w", ErrHTTPTimeout, err)
	}
	return err
}

// readResponse reads one answer; status is 0 until the status line was
// read.
func (c *RawHTTPConn) readResponse() (int, error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	status, err := parseStatusLine(line)
	if err != nil {
		return 0, err
	}
	length, chunked, closeAfter := int64(-1), false, false
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return status, fmt.Errorf("header: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			return status, fmt.Errorf("malformed header %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 {
				return status, fmt.Errorf("malformed Content-Length %q", value)
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			closeAfter = bytes.EqualFold(value, []byte("close"))
		}
	}
	c.Body = c.Body[:0]
	switch {
	case status/100 == 1 || status == 204 || status == 304:
	case chunked:
		err = c.readChunked()
	case length >= 0:
		err = c.readN(length)
	default:
		// No length: the body runs until the server closes.
		var buf bytes.Buffer
		_, err = buf.ReadFrom(c.br)
		c.Body = append(c.Body, buf.Bytes()...)
		closeAfter = true
	}
	if err != nil {
		return status, fmt.Errorf("body: %w", err)
	}
	if closeAfter {
		c.Close()
	}
	return status, nil
}

func parseStatusLine(line []byte) (int, error) {
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, fmt.Errorf("malformed status line %q", bytes.TrimRight(line, "\r\n"))
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil || code < 100 {
		return 0, fmt.Errorf("malformed status line %q", bytes.TrimRight(line, "\r\n"))
	}
	return code, nil
}

func (c *RawHTTPConn) readN(n int64) error {
	if n > 64<<20 {
		return fmt.Errorf("answer of %d bytes is too large", n)
	}
	start := len(c.Body)
	c.Body = append(c.Body, make([]byte, n)...)
	_, err := io.ReadFull(c.br, c.Body[start:])
	return err
}

func (c *RawHTTPConn) readChunked() error {
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("malformed chunk size %q", line)
		}
		if n == 0 {
			// Trailers, then the blank line.
			for {
				line, err := c.br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if err := c.readN(n); err != nil {
			return err
		}
		var crlf [2]byte
		if _, err := io.ReadFull(c.br, crlf[:]); err != nil {
			return err
		}
		if crlf != [2]byte{'\r', '\n'} {
			return errors.New("chunk not followed by CRLF")
		}
	}
}
