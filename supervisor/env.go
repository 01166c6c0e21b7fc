package supervisor

import (
	"github.com/hermesbox/hbx/internal/account"
)

// DefaultPath is the PATH of a program whose Environment sets none: fixed,
// never the supervisor's own (a directory there that another user can
// write would choose the program's binaries). It is the same list as
// release.DefaultHostPath.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// programEnv is the environment of a program without Build, later
// entries replacing earlier ones: PATH (DefaultPath), HOME, USER, LOGNAME
// and SHELL of the user it runs as, Options.Env, the program's
// Environment, then supervisord's SUPERVISOR_ENABLED,
// SUPERVISOR_PROCESS_NAME, SUPERVISOR_GROUP_NAME and, with a socket,
// SUPERVISOR_SERVER_URL. Nothing of the supervisor's own environment
// reaches it unless Options.Env carries it.
func (p *proc) programEnv() ([]string, error) {
	prof, err := account.LookupProfile(p.spec.User)
	if err != nil {
		return nil, err
	}
	base := []string{"PATH=" + DefaultPath, "HOME=" + prof.Home, "USER=" + prof.Name, "LOGNAME=" + prof.Name, "SHELL=" + prof.Shell}
	sup := []string{"SUPERVISOR_ENABLED=1", "SUPERVISOR_PROCESS_NAME=" + p.spec.Name, "SUPERVISOR_GROUP_NAME=" + p.spec.Name}
	if p.s.opts.Socket != "" {
		sup = append(sup, "SUPERVISOR_SERVER_URL=unix://"+p.s.opts.Socket)
	}
	return mergeEnv(base, p.s.opts.Env, p.spec.Environment, sup), nil
}
