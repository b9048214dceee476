import AsyncHTTPClient
import Foundation
import NIOCore

/// What a sync server says beside its status (a refusal's message, Retry-After), as the mount
/// takes it: the server is not trusted, so its words are bounded before anything keeps or
/// shows them, and a wait it asks for is one the mount can keep.
enum ServerWords {
    /// The most characters of a server's message the mount keeps.
    static let maximumCharacters = 1000
    /// The most bytes of an error's body read.
    static let maximumBodyBytes = 64 << 10
    /// The longest wait a Retry-After may ask; a longer one is waited this long.
    static let longestRetryAfter: Int64 = 3600

    /// `text` as one line: control characters become spaces, and it is cut to
    /// `maximumCharacters`.
    static func line(_ text: String) -> String {
        var line = String(String.UnicodeScalarView(text.unicodeScalars.prefix(maximumCharacters).map {
            $0.properties.generalCategory == .control ? " " : $0
        }))
        if text.unicodeScalars.count > maximumCharacters { line += "..." }
        return line
    }

    /// The seconds a Retry-After asks for, within 1 s and `longestRetryAfter`; nil for none or
    /// a value that is not a count of seconds (the mount's own backoff then applies).
    static func retryAfter(_ header: String?) -> Duration? {
        guard let header, let seconds = Int64(header.trimmingCharacters(in: .whitespaces)), seconds >= 1 else { return nil }
        return .seconds(min(seconds, longestRetryAfter))
    }

    /// An error's body, at most `maximumBodyBytes`, read within `timeout`; empty when it does
    /// not come whole in time (its words are then the status's).
    static func body(of response: HTTPClientResponse, within timeout: TimeAmount) async -> Data {
        (try? await ResponseBody.collect(response, upTo: maximumBodyBytes, within: timeout)) ?? Data()
    }
}
