// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "quickway",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "quickway", targets: ["quickway"]),
        .library(name: "QuickwayCore", targets: ["QuickwayCore"]),
    ],
    dependencies: [
        .package(url: "https://github.com/jpsim/Yams", from: "5.0.1"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        // System libraries from Debian's -dev packages (see scripts/setup.sh).
        .systemLibrary(name: "CLibevent", pkgConfig: "libevent_pthreads",
                       providers: [.apt(["libevent-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl",
                       providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CNghttp2", pkgConfig: "libnghttp2",
                       providers: [.apt(["libnghttp2-dev"])]),
        // Route path rewrites (`rewrite.path_regex`): PCRE2 with its JIT, as nginx uses.
        .systemLibrary(name: "CPCRE2", pkgConfig: "libpcre2-8",
                       providers: [.apt(["libpcre2-dev"])]),
        // Answer compression (`compression`): gzip (zlib), brotli and zstd, each through
        // its streaming API.
        .systemLibrary(name: "CZlib", pkgConfig: "zlib",
                       providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "CBrotli", pkgConfig: "libbrotlienc",
                       providers: [.apt(["libbrotli-dev"])]),
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd",
                       providers: [.apt(["libzstd-dev"])]),
        // Typed C wrappers for libcurl's variadic calls, which Swift cannot call, and
        // hiredis (libhiredis-dev): its reply parser, for the shared Redis tier.
        .target(name: "CQuickwayShims", dependencies: ["CCurl", "COpenSSL", "CLibevent"],
                cSettings: [.unsafeFlags(["-O2"])],
                linkerSettings: [.linkedLibrary("hiredis"), .linkedLibrary("ssl"), .linkedLibrary("z")]),
        .target(
            name: "QuickwayCore",
            dependencies: ["CLibevent", "CCurl", "COpenSSL", "CNghttp2", "CPCRE2", "CQuickwayShims",
                           "CZlib", "CBrotli", "CZstd",
                           .product(name: "Yams", package: "Yams"),
                           .product(name: "Logging", package: "swift-log")]
            // Release builds use SwiftPM's -O: bounds and overflow checks stay on in the
            // shipped binary, the same checked build that is fuzzed (not -Ounchecked).
        ),
        .executableTarget(name: "quickway", dependencies: ["QuickwayCore",
                                                           .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        // Config-loader fuzz harness (scripts/dev/fuzz.sh builds it with libFuzzer).
        .executableTarget(name: "quickway-fuzz-config", dependencies: ["QuickwayCore"],
                          swiftSettings: [.unsafeFlags(["-parse-as-library"])]),
        .testTarget(name: "QuickwayCoreTests", dependencies: ["QuickwayCore", "COpenSSL", "CNghttp2", "CZlib", "CBrotli", "CZstd"]),
    ],
    swiftLanguageModes: [.v6]
)
