import Glibc

/// The signals `serve` handles, as ordinary code on the thread that waits for them
/// (`sigwait`), never in a signal handler: SIGTERM and SIGINT stop, SIGHUP reloads the
/// config file, SIGUSR1 reopens the access log.
enum SignalLoop {
    /// Blocks the handled signals and ignores SIGPIPE. Call it before any other thread
    /// starts: threads inherit the mask, so only `waitForStop` ever sees these signals.
    static func blockHandledSignals() {
        var set = handledSignals()
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
    }

    /// Waits for signals, running `reload` on SIGHUP and `reopenLogs` on SIGUSR1, until
    /// SIGTERM or SIGINT arrives; returns that signal.
    static func waitForStop(reload: () -> Void, reopenLogs: () -> Void) -> Int32 {
        var set = handledSignals()
        while true {
            var sig: Int32 = 0
            guard sigwait(&set, &sig) == 0 else { continue }
            switch sig {
            case SIGUSR1: reopenLogs()
            case SIGHUP: reload()
            default: return sig
            }
        }
    }

    private static func handledSignals() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGHUP)
        sigaddset(&set, SIGUSR1)
        return set
    }
}
