package app

import (
	"io"
	stdlog "log"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
)

// zerolog's encoding settings are global to the process; this is the one
// place inboxd sets them. Durations are written as Go duration strings
// ("250ms", "9.0865s"), the syntax of the INBOXD_* variables, so that every
// duration carries its unit; times to the millisecond, in RFC 3339.
func init() {
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
}

// newLogger returns the daemon's logger on w, as INBOXD_LOG_LEVEL and
// INBOXD_LOG_FORMAT of cfg say.
func newLogger(cfg config.Config, w io.Writer) zerolog.Logger {
	return buildLogger(cfg.LogFormat, cfg.LogLevel, w)
}

// environLogger is the logger of the lines written before the
// configuration is loaded (an unknown variable, a bad setting, a signal):
// INBOXD_LOG_FORMAT and INBOXD_LOG_LEVEL as environ has them, a value that
// is not valid taking its default (config.Load names it).
func environLogger(environ []string, w io.Writer) zerolog.Logger {
	var format, level string
	for _, kv := range environ {
		switch k, v, _ := strings.Cut(kv, "="); k {
		case "INBOXD_LOG_FORMAT":
			format = v
		case "INBOXD_LOG_LEVEL":
			level = v
		}
	}
	return buildLogger(format, level, w)
}

// buildLogger writes JSON lines to w, or zerolog's human format when
// format says text (or auto, the default, and w is a terminal).
func buildLogger(format, level string, w io.Writer) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	if tty := isTerminal(w); logText(format, tty) {
		// Colours only on a terminal: a file or a pipe gets plain text.
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !tty}
	}
	host, _ := os.Hostname()
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("host", host).Logger()
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// captureStdlog sends what the standard library's log package prints (the
// HTTP servers' connection errors, a library's complaint) to log, as warn
// lines of component stdlib, until the returned function is called: every
// line the daemon writes is then structured. Only for a daemon that logs to
// the process's own stderr, since the log package is global.
func captureStdlog(log zerolog.Logger, stderr io.Writer) (restore func()) {
	if stderr != os.Stderr {
		return func() {}
	}
	prevOut, prevFlags := stdlog.Writer(), stdlog.Flags()
	stdlog.SetFlags(0)
	stdlog.SetOutput(stdlogWriter{log.With().Str("component", "stdlib").Logger()})
	return func() {
		stdlog.SetOutput(prevOut)
		stdlog.SetFlags(prevFlags)
	}
}

// stdlogWriter logs each write of the log package as one warn line.
type stdlogWriter struct{ log zerolog.Logger }

func (w stdlogWriter) Write(p []byte) (int, error) {
	w.log.Warn().Msg(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// logError logs err, the failure of a daemon command, one line per problem
// (a bad configuration has one per bad setting, each naming its variable
// in the variable field).
func logError(log zerolog.Logger, err error, usage bool) {
	msg := "stopped with an error"
	if usage {
		msg = "cannot start"
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		ev := log.Error().Str("error", line)
		if v := variableOf(line); v != "" {
			ev = ev.Str("variable", v)
		}
		ev.Msg(msg)
	}
}

// variableOf is the INBOXD_* variable a line of a configuration error or
// warning starts with ("INBOXD_LEASE: must be …"), or "".
func variableOf(line string) string {
	if !strings.HasPrefix(line, "INBOXD_") {
		return ""
	}
	end := strings.IndexFunc(line, func(r rune) bool { return r != '_' && (r < 'A' || r > 'Z') && (r < '0' || r > '9') })
	if end < 0 {
		return line
	}
	return line[:end]
}
