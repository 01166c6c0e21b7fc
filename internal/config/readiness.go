package config

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Readiness is what a program must offer before it is RUNNING
// (programs.<name>.ready_*), beside startsecs; every check set must pass
// within ReadyWait seconds of its start, or the start failed (it counts
// toward startretries). Paths may name variables of the program's
// environment ($HERMES_HOME, ${HERMES_HOME}); ExpandReadyPath expands
// them. The built-in executor's readiness is health.readiness.
type Readiness struct {
	// Lock is a file whose lock a process of the program's tree holds
	// (programs.<name>.ready_lock). Default ""; hermes
	// $HERMES_HOME/gateway.lock.
	Lock string
	// File is a JSON file whose Field (dotted) is Value
	// (programs.<name>.ready_file, ready_field, ready_value), written
	// within MaxAge seconds, 0 for any age (ready_max_age). Default "";
	// hermes $HERMES_HOME/gateway_state.json, gateway_state, running, 120.
	File, Field, Value string
	MaxAge             int
	// TCP is a host:port that accepts a connection
	// (programs.<name>.ready_tcp). Default "".
	TCP string
	// HTTP is an http or https URL that answers GET with 2xx
	// (programs.<name>.ready_http). Default "".
	HTTP string
	// Wait is how many seconds a start waits for readiness
	// (programs.<name>.ready_wait). Default 60; hermes 120.
	Wait int
}

// IsZero reports whether r sets no check (Wait aside).
func (r Readiness) IsZero() bool {
	r.Wait, r.MaxAge = 0, 0
	return r == Readiness{}
}

// ExpandReadyPath expands $VAR and ${VAR} in path from p's environment;
// missing names the first variable the environment lacks ("" when none).
func (p Program) ExpandReadyPath(path string) (out, missing string) {
	out = os.Expand(path, func(k string) string {
		v, found := p.Environment[k]
		if !found && missing == "" {
			missing = k
		}
		return v
	})
	return out, missing
}

// readinessFields are the programs.<name>.ready_* fields, in display
// order.
var readinessFields = []programField{
	{"ready_lock", decodeAs(kindString), func(p *Program) any { return &p.Ready.Lock }},
	{"ready_file", decodeAs(kindString), func(p *Program) any { return &p.Ready.File }},
	{"ready_field", decodeAs(kindString), func(p *Program) any { return &p.Ready.Field }},
	{"ready_value", decodeAs(kindString), func(p *Program) any { return &p.Ready.Value }},
	{"ready_max_age", decodeAs(kindInt), func(p *Program) any { return &p.Ready.MaxAge }},
	{"ready_tcp", decodeAs(kindString), func(p *Program) any { return &p.Ready.TCP }},
	{"ready_http", decodeAs(kindString), func(p *Program) any { return &p.Ready.HTTP }},
	{"ready_wait", decodeAs(kindInt), func(p *Program) any { return &p.Ready.Wait }},
}

// hermesReadiness is the Hermes gateway's readiness: its lock held by its
// tree and its state file saying running within 120 s (its own bound).
var hermesReadiness = Readiness{
	Lock: "$HERMES_HOME/gateway.lock", File: "$HERMES_HOME/gateway_state.json",
	Field: "gateway_state", Value: "running", MaxAge: 120, Wait: 120,
}

// validateReadiness checks programs.<name>.ready_* and log_file.
func validateReadiness(ps *collector, name string, p Program) {
	k := func(f string) string { return "programs." + name + "." + f }
	q := strconv.Quote
	r := p.Ready
	for _, f := range []struct{ name, v string }{{"ready_lock", r.Lock}, {"ready_file", r.File}, {"log_file", p.LogFile}} {
		if f.v == "" {
			continue
		}
		x, missing := p.ExpandReadyPath(f.v)
		switch {
		case missing != "":
			ps.add(k(f.name), q(f.v), "names $"+missing+", which "+k("environment")+" does not set (set it, or set "+f.name+")")
		case !filepath.IsAbs(x):
			ps.add(k(f.name), q(f.v), ruleNotAbs)
		}
	}
	if (r.File == "") != (r.Field == "") || (r.File == "") != (r.Value == "") {
		ps.add(k("ready_file"), q(r.File), "needs ready_field and ready_value, and they need it")
	}
	if r.MaxAge < 0 {
		ps.add(k("ready_max_age"), strconv.Itoa(r.MaxAge), ruleNegative)
	}
	if r.Wait <= 0 {
		ps.add(k("ready_wait"), strconv.Itoa(r.Wait), "is not positive")
	}
	if r.TCP != "" {
		if _, port, err := net.SplitHostPort(r.TCP); err != nil || port == "" {
			ps.add(k("ready_tcp"), q(r.TCP), "is not a host:port")
		}
	}
	if r.HTTP != "" {
		if u, err := url.Parse(r.HTTP); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(r.HTTP, " \t") {
			ps.add(k("ready_http"), q(r.HTTP), "is not an http or https URL")
		}
	}
}
