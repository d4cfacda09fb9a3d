package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progressInterval is how often the progress line is redrawn.
const progressInterval = 250 * time.Millisecond

// isTerminal reports whether w is a character device. The progress line is
// carriage-return animation: in a file or a pipe it would be noise.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// startProgress redraws one status line on w every interval until the
// returned stop is called; stop draws the last state, ends the line and
// returns once the drawing goroutine has exited.
func startProgress(w io.Writer, rec *recorder, start time.Time, interval time.Duration) (stop func()) {
	quit := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		// The rate is taken over the last second or so, not since start, so
		// it shows what the server does now.
		type point struct {
			at        time.Time
			completed int64
		}
		window := make([]point, 0, 8)
		window = append(window, point{start, 0})
		draw := func(now time.Time) {
			c := rec.completed.Load()
			window = append(window, point{now, c})
			for len(window) > 2 && now.Sub(window[0].at) > time.Second {
				window = window[1:]
			}
			rate := perSecond(c-window[0].completed, now.Sub(window[0].at))
			fmt.Fprint(w, "\r\x1b[K", progressLine(now.Sub(start), rec.sent.Load(), c, rec.failed.Load(), rate))
		}
		for {
			select {
			case now := <-ticker.C:
				draw(now)
			case <-quit:
				draw(time.Now())
				fmt.Fprintln(w)
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-exited
	}
}

func progressLine(elapsed time.Duration, sent, completed, errors int64, rate float64) string {
	return fmt.Sprintf("elapsed %6.1fs  sent %d  completed %d  errors %d  %.1f req/s",
		elapsed.Seconds(), sent, completed, errors, rate)
}
