package controller

import (
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/metrics"
	"github.com/kube-ipvs/kube-ipvs/model"
)

// problemReporter raises a Service's Problems (what was wrong with its input, and the
// virtual servers it lost to another Service) as Warning Events and log lines, once per
// change of its set of Problems, so that a standing problem does not flood the API
// server. Only the sync goroutine calls it.
type problemReporter struct {
	recorder record.EventRecorder // nil: log only
	metrics  *metrics.Metrics     // nil: none
	log      *slog.Logger
	last     map[model.ServiceName]string
}

func newProblemReporter(recorder record.EventRecorder, m *metrics.Metrics, log *slog.Logger) *problemReporter {
	return &problemReporter{recorder: recorder, metrics: m, log: log, last: map[model.ServiceName]string{}}
}

// report raises st's Problems on svc if they differ from the last ones reported.
func (r *problemReporter) report(svc *corev1.Service, st *model.ServiceState) {
	parts := make([]string, len(st.Reasons))
	for i, p := range st.Reasons {
		parts[i] = p.String()
	}
	sig := strings.Join(parts, "\n")
	if sig == r.last[st.Name] {
		return
	}
	r.last[st.Name] = sig
	if sig == "" {
		delete(r.last, st.Name)
	}
	for _, p := range st.Reasons {
		r.log.Warn("service problem", "service", st.Name, "reason", p.Reason, "message", p.Message)
		if r.metrics != nil {
			r.metrics.InvalidAnnotation(p.Reason)
		}
		if r.recorder != nil {
			r.recorder.Event(svc, corev1.EventTypeWarning, p.Reason, p.Message)
		}
	}
}

// forget drops what was reported for a Service that is gone.
func (r *problemReporter) forget(name model.ServiceName) { delete(r.last, name) }
