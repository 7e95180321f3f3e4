package app

import (
	"context"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/rs/zerolog"
)

// systemdNotifier speaks systemd's notify protocol (Type=notify units):
// READY=1 once the daemon works, WATCHDOG=1 while its loops make progress,
// STOPPING=1 when it stops. Without NOTIFY_SOCKET (not under systemd)
// every message is dropped.
type systemdNotifier struct {
	log zerolog.Logger
}

func (n systemdNotifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		n.log.Warn().Err(err).Str("state", state).Msg("systemd notification failed")
	}
}

// ready sends READY=1 (with a status line).
func (n systemdNotifier) ready(status string) {
	n.send(daemon.SdNotifyReady + "\nSTATUS=" + status)
}

// stopping sends STOPPING=1.
func (n systemdNotifier) stopping() { n.send(daemon.SdNotifyStopping) }

// progress says whether the daemon's loops are moving: nil when they are,
// otherwise what is stuck.
type progress func(now time.Time) error

// watchdog feeds systemd's watchdog (WatchdogSec=) twice per period for as
// long as alive reports progress, until ctx ends. A loop that stopped moving
// stops the feeding, and systemd restarts the service. Without a watchdog
// configured it returns at once.
func (n systemdNotifier) watchdog(ctx context.Context, alive progress) {
	period, err := daemon.SdWatchdogEnabled(false)
	if err != nil || period <= 0 {
		return
	}
	t := time.NewTicker(period / 2)
	defer t.Stop()
	starved := false
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if err := alive(now); err != nil {
				if !starved {
					n.log.Error().Err(err).Dur("watchdog", period).
						Msg("not feeding the systemd watchdog: a loop stopped making progress; systemd will restart the service")
				}
				starved = true
				continue
			}
			starved = false
			n.send(daemon.SdNotifyWatchdog)
		}
	}
}
