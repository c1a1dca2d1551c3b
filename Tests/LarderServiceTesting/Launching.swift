// The larder executable started through another tool (a shell that ignores a signal first,
// setpriv that drops root), for tests of what the process meets rather than what it is told;
// and run to its end, for tests of the command line (`larder cache …`).

import Foundation
import XCTest

extension IntegrationTestCase {
    /// Runs `tool` with `toolArguments`, then the executable's path, then `arguments` (the tool
    /// execs the executable, so the process is Larder's own). Returns it and its stderr.
    public func launch(_ arguments: [String], through tool: String, _ toolArguments: [String]) throws -> (Process, Pipe) {
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            throw skipOrFail("the larder executable is not built next to the tests (run scripts/test, or set LARDER_BINARY)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = toolArguments + [binary.path] + arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        return (process, errors)
    }

    /// Runs the executable with `arguments` to its end, `stdin` as its input and `environment`
    /// added to the test's; returns its exit status, stdout and stderr.
    public func runExecutable(_ arguments: [String], stdin: String? = nil, environment: [String: String] = [:]) throws -> (
        Int32, String, String
    ) {
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            throw skipOrFail("the larder executable is not built next to the tests")
        }
        let (status, out, err) = try runToEnd(binary, arguments, stdin: stdin.map { Data($0.utf8) }, environment: environment)
        return (status, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }
}

/// The larder executable of the build the tests are part of: LARDER_BINARY when set, else the
/// one beside the test bundle (the products of one build share a directory).
public var larderExecutable: URL {
    if let override = ProcessInfo.processInfo.environment["LARDER_BINARY"] { return URL(fileURLWithPath: override) }
    var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    while directory.path != "/" {
        let candidate = directory.appendingPathComponent("larder")
        if FileManager.default.isExecutableFile(atPath: candidate.path), !candidate.hasDirectoryPath { return candidate }
        directory.deleteLastPathComponent()
    }
    return URL(fileURLWithPath: "/nonexistent/larder")
}

/// Runs `executable` with `arguments` to its end, `stdin` as its input and `environment` added
/// to the test's; returns its exit status, stdout and stderr (stderr read beside stdout, so
/// neither pipe fills while the other is read).
public func runToEnd(_ executable: URL, _ arguments: [String], stdin: Data? = nil, environment: [String: String] = [:]) throws -> (
    Int32, Data, Data
) {
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let output = Pipe()
    let errors = Pipe()
    let input = Pipe()
    process.standardOutput = output
    process.standardError = errors
    process.standardInput = input
    try process.run()
    let errorsRead = DispatchGroup()
    nonisolated(unsafe) var err = Data()
    errorsRead.enter()
    DispatchQueue.global().async {
        err = errors.fileHandleForReading.readDataToEndOfFile()
        errorsRead.leave()
    }
    if let stdin { input.fileHandleForWriting.write(stdin) }
    try input.fileHandleForWriting.close()
    let out = output.fileHandleForReading.readDataToEndOfFile()
    errorsRead.wait()
    process.waitUntilExit()
    return (process.terminationStatus, out, err)
}
