import KVServer
import Testing

/// What the server's log names a refused token by: its id, never its secret.
@Suite("Refused tokens in the log")
struct RefusedTokenIDTests {
    @Test("a token's id is the part between kvs_ and the secret, '-' included, as ids are made")
    func ids() {
        #expect(AccountDirectory.tokenID(of: "kvs_C-itxxAh_thesecret") == "C-itxxAh")
        #expect(AccountDirectory.tokenID(of: "kvs_abc123_s") == "abc123")
        #expect(AccountDirectory.tokenID(of: "bearer-garbage") == "(a token not of the form kvs_ID_SECRET)")
        #expect(AccountDirectory.tokenID(of: "kvs_a\nb_s") == "(a token not of the form kvs_ID_SECRET)")
        #expect(!AccountDirectory.tokenID(of: "kvs_id_thesecret").contains("thesecret"))
    }
}
