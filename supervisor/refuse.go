package supervisor

import (
	"context"
	"errors"
)

// ErrorClass pairs a class of errors of a program's Check with the code
// the control socket carries it by: a refusal whose cause errors.Is Err
// goes out with Code (Result.Class, and the "class" of a refused call's
// error answer), and the client (Client.Classes) makes the refusal it
// reads match Err again, so a caller maps it as it would the local error
// (hbx: a bad env file is exit 2 whether the check ran here or in the
// supervisor). Codes are short lowercase words ("env_file").
type ErrorClass struct {
	Code string
	Err  error
}

// classOf returns the code of the first of classes err belongs to; ""
// when none.
func classOf(classes []ErrorClass, err error) string {
	for _, c := range classes {
		if errors.Is(err, c.Err) {
			return c.Code
		}
	}
	return ""
}

// classErr returns the error of classes coded code; nil when none is.
func classErr(classes []ErrorClass, code string) error {
	if code == "" {
		return nil
	}
	for _, c := range classes {
		if c.Code == code {
			return c.Err
		}
	}
	return nil
}

// preflight runs the Check of each program of list in order (verb
// "restart" or "start" names the refused request) and returns the
// refusals by program name, each logged.
func (s *Supervisor) preflight(ctx context.Context, verb string, list []string) map[string]*RefusedError {
	refused := map[string]*RefusedError{}
	for _, n := range list {
		check := s.procs[n].spec.Check
		if check == nil {
			continue
		}
		if err := check(ctx); err != nil {
			re := &RefusedError{Verb: verb, Name: n, Err: err}
			s.log.Warn(verb+" refused, "+re.nothing(), "program", n, "err", err)
			refused[n] = re
		}
	}
	return refused
}

// without returns list less the names of refused, in order.
func without(list []string, refused map[string]*RefusedError) []string {
	var out []string
	for _, n := range list {
		if refused[n] == nil {
			out = append(out, n)
		}
	}
	return out
}

// refusals is the error of a call whose every program of list was
// refused: the one *RefusedError, or all of them joined (one line each),
// in list's order.
func refusals(list []string, refused map[string]*RefusedError) error {
	var errs []error
	for _, n := range list {
		if re := refused[n]; re != nil {
			errs = append(errs, re)
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// mergeRefused returns done (the Results of the programs not refused)
// with a Result for each refused program of list, in list's order.
func (s *Supervisor) mergeRefused(list []string, done []Result, refused map[string]*RefusedError) []Result {
	if len(refused) == 0 {
		return done
	}
	byName := map[string]Result{}
	for _, r := range done {
		byName[r.Name] = r
	}
	out := make([]Result, 0, len(list))
	for _, n := range list {
		if re := refused[n]; re != nil {
			out = append(out, Result{Name: n, State: s.Get(n).State, Error: re.Error(), Refused: true, Class: classOf(s.opts.ErrorClasses, re.Err)})
			continue
		}
		out = append(out, byName[n])
	}
	return out
}
