package app

// logText reports whether logs in format (INBOXD_LOG_FORMAT's value) are
// written for people rather than as JSON lines, terminal saying whether
// they go to a terminal: text (or console) always, json never, auto (or a
// value Validate refuses) on a terminal.
func logText(format string, terminal bool) bool {
	switch format {
	case "text", "console":
		return true
	case "json":
		return false
	}
	return terminal
}
