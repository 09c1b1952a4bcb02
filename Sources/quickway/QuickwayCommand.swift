import ArgumentParser
import QuickwayCore

/// `quickway`: the root command. It runs nothing itself; without a subcommand it
/// prints its help.
struct QuickwayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quickway",
        abstract: "quickway \(QuickwayVersion.string): an HTTP API gateway",
        discussion: """
        Commands:
          quickway serve --config FILE     run the gateway (default FILE: config.yaml)
          quickway check --config FILE     validate a config file and exit
                                           (0 valid, 1 invalid)
          quickway demo-backends [--backend ADDR=DELAY]...
                                           run local demo backends; default:
                                           127.0.0.2:9001=2ms 127.0.0.3:9001=10ms
                                           127.0.0.4:9001=30ms
          quickway sign --key ID --secret-env VAR --salt S --method M --url URL
                        [--body-file F] [--timestamp UNIX] [--nonce N] [--curl]
                                           print the QW1 Authorization value for a
                                           request (--curl: a ready curl command)
          quickway --help | --version

        Signals (serve): SIGTERM or SIGINT stop accepting, finish requests in flight, \
        exit 0; SIGHUP reloads the config file; SIGUSR1 reopens the access log (rotation).

        Exit codes: 0 done; 1 invalid config or cannot start; 2 usage error.

        Docs: README.md (configuration, signed calls, fastest IP, cache, Redis tier, deploying).
        """,
        version: "quickway \(QuickwayVersion.string)",
        subcommands: [ServeCommand.self, CheckCommand.self, DemoBackendsCommand.self, SignCommand.self, VersionCommand.self])
}

/// A failure a command reports itself: `message` on standard error, exit `code`.
struct CommandFailure: Error {
    /// Usage errors, as before the command line moved to argument-parser.
    static let usageCode: Int32 = 2
    var message: String
    var code: Int32
}

/// `quickway version`, the older spelling of `--version` (not listed in the help).
struct VersionCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "version", abstract: "Print the version.", shouldDisplay: false)

    func run() { print("quickway \(QuickwayVersion.string)") }
}
