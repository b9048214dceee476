/// Runs `body` in a task of its own and returns what it returns or throws.
///
/// A request's task lives as long as its response, and an event stream's for hours. Swift
/// keeps a task's memory for its calls at the most they ever took at once, until the task
/// ends: one deep call made while a stream opens (a database query through a driver's many
/// layers) stayed in every stream for its life. Made in a task of its own, it is freed when
/// the call returns. Costs one task per call.
func inTaskOfItsOwn<T: Sendable, E: Error>(_ body: @escaping @Sendable () async throws(E) -> T) async throws(E) -> T {
    let result = await Task { () async -> Result<T, E> in
        do throws(E) {
            return .success(try await body())
        } catch {
            return .failure(error)
        }
    }.value
    return try result.get()
}
