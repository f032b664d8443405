package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/config"
)

// klogJSON is a slog.Handler that writes kube-proxy's JSON log lines (--logging-format=json,
// component-base's JSON format), so a log pipeline built for kube-proxy parses kube-ipvs as
// it is:
//
//	{"ts":1765000000123.456,"caller":"kube-ipvs/run.go:210","msg":"kube-ipvs started","v":0,"mode":"ipvs"}
//	{"ts":1765000000124.5,"caller":"controller/sync.go:88","msg":"sync failed","service":"a/b","err":"..."}
//
// ts is milliseconds since the epoch; caller the source's folder and file; v the verbosity
// of an info line (debug lines are V(config.DebugVerbosity), info and warnings 0); an error
// line has no v, and its "err" comes last, as klog's ErrorS writes it. Durations are strings
// ("1.5s"), as the JSON format encodes them.
type klogJSON struct {
	mu    *sync.Mutex
	w     io.Writer
	level slog.Leveler
	// pre holds the attributes of With calls, encoded; group the WithGroup prefix.
	pre   []byte
	group string
	now   func() time.Time
}

func newKlogJSON(w io.Writer, level slog.Leveler) *klogJSON {
	return &klogJSON{mu: &sync.Mutex{}, w: w, level: level, now: time.Now}
}

func (h *klogJSON) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *klogJSON) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.pre = bytes.Clone(h.pre)
	for _, a := range attrs {
		c.pre = c.appendAttr(c.pre, h.group, a)
	}
	return &c
}

func (h *klogJSON) WithGroup(name string) slog.Handler {
	c := *h
	c.group = h.group + name + "."
	return &c
}

func (h *klogJSON) Handle(_ context.Context, r slog.Record) error {
	b := make([]byte, 0, 256)
	b = append(b, `{"ts":`...)
	b = strconv.AppendFloat(b, float64(h.now().UnixNano())/float64(time.Millisecond), 'f', -1, 64)
	if r.PC != 0 {
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		b = append(b, `,"caller":`...)
		b = appendString(b, filepath.Base(filepath.Dir(f.File))+"/"+filepath.Base(f.File)+":"+strconv.Itoa(f.Line))
	}
	b = append(b, `,"msg":`...)
	b = appendString(b, r.Message)
	isError := r.Level >= slog.LevelError
	if !isError {
		v := 0
		if r.Level < slog.LevelInfo {
			v = config.DebugVerbosity
		}
		b = append(b, `,"v":`...)
		b = strconv.AppendInt(b, int64(v), 10)
	}
	b = append(b, h.pre...)
	var errAttr *slog.Attr
	r.Attrs(func(a slog.Attr) bool {
		if isError && a.Key == "err" && h.group == "" && errAttr == nil {
			errAttr = &a
			return true
		}
		b = h.appendAttr(b, h.group, a)
		return true
	})
	if errAttr != nil {
		b = h.appendAttr(b, "", *errAttr)
	}
	b = append(b, "}\n"...)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(b)
	return err
}

// appendAttr writes ,"key":value.
func (h *klogJSON) appendAttr(b []byte, prefix string, a slog.Attr) []byte {
	v := a.Value.Resolve()
	if a.Key == "" && v.Kind() != slog.KindGroup {
		return b
	}
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			b = h.appendAttr(b, p, g)
		}
		return b
	}
	b = append(b, ',')
	b = appendString(b, prefix+a.Key)
	b = append(b, ':')
	return appendValue(b, v)
}

func appendValue(b []byte, v slog.Value) []byte {
	switch v.Kind() {
	case slog.KindString:
		return appendString(b, v.String())
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindFloat64:
		return appendJSON(b, v.Float64())
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool())
	case slog.KindDuration:
		return appendString(b, v.Duration().String())
	case slog.KindTime:
		return appendString(b, v.Time().Format(time.RFC3339Nano))
	}
	switch x := v.Any().(type) {
	case error:
		return appendString(b, x.Error())
	case fmt.Stringer:
		return appendString(b, x.String())
	}
	return appendJSON(b, v.Any())
}

func appendString(b []byte, s string) []byte { return appendJSON(b, s) }

// appendJSON encodes v without escaping <, > and &, as zap does not: a log line is not HTML.
// A value JSON cannot hold (NaN, a channel) is written as its fmt form, quoted.
func appendJSON(b []byte, v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return appendJSON(b, fmt.Sprint(v))
	}
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
