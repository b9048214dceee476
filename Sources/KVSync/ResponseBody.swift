import AsyncHTTPClient
import Foundation
import NIOCore

/// An answer's body, read within a deadline of its own: the client's timeout ends once the
/// head has come, and a server that sends part of a body and stalls must not hold the sync
/// thread for ever.
enum ResponseBody {
    struct TimedOut: Error {}

    /// The body of `response`, at most `limit` bytes, whole within `timeout`; throws
    /// `TimedOut` when it is not, the body's error when it fails.
    static func collect(_ response: HTTPClientResponse, upTo limit: Int, within timeout: TimeAmount) async throws -> Data {
        try await withThrowingTaskGroup(of: Data.self) { group in
            group.addTask { Data(try await response.body.collect(upTo: limit).readableBytesView) }
            group.addTask {
                try await Task.sleep(for: .nanoseconds(timeout.nanoseconds))
                throw TimedOut()
            }
            defer { group.cancelAll() }
            guard let body = try await group.next() else { throw TimedOut() }
            return body
        }
    }
}
